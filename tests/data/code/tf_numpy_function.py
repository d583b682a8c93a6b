import tensorflow as tf


def decode(path):
    return load_and_augment(path.numpy())


ds = tf.data.Dataset.from_tensor_slices(paths)
ds = ds.map(lambda p: tf.numpy_function(decode, [p], tf.float32), num_parallel_calls=8)
ds = ds.map(lambda p: tf.py_function(decode, [p], tf.float32))

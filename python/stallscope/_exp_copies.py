"""Private copies of what the job handed out, for the experiment controls that serve them
again: a DataLoader's batches (STALLSCOPE_SYNTHETIC_DATA, stallscope/_exp_synthetic.py) and an
eval forward's outputs (STALLSCOPE_SIDE_WORK_OFF, stallscope/_exp_side_work.py). Tensors are
detached and cloned (pinned ones stay pinned), containers rebuilt (tuple, list, dict,
OrderedDict, namedtuple), other objects kept as they are; torch is the job's, never imported
before the job did."""

import collections

MAX_REPR_CHARS = 100  # a non-tensor argument with a longer repr makes the call uncacheable


class Uncacheable(Exception):
    """A value whose copy or signature could not be made safely."""


class Pinned:
    """A cached tensor whose copies must be pinned (a pin_memory loader's batch)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def template(obj, tensor_type, check_pinned):
    """A private copy of `obj` to serve copies from; tensors detached and cloned (pinned ones
    marked), containers rebuilt, other objects kept as they are."""
    if isinstance(obj, tensor_type):
        if check_pinned and obj.device.type == "cpu" and obj.is_pinned():
            return Pinned(pinned_copy(obj))
        return obj.detach().clone()
    return rebuild(obj, lambda item: template(item, tensor_type, check_pinned))


def pinned_copy(tensor):
    import torch  # already imported: the job's torch
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True).copy_(tensor)


def fresh_copy(kept, tensor_type):
    """A copy of a template made by template()/output_template() for the job to own."""
    if isinstance(kept, tensor_type):
        return kept.clone()
    if type(kept) is Pinned:
        return pinned_copy(kept.tensor)
    return rebuild(kept, lambda item: fresh_copy(item, tensor_type))


def rebuild(obj, each):
    kind = type(obj)
    if kind is tuple or kind is list:
        return kind(each(item) for item in obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return kind(*(each(item) for item in obj))
    if kind is dict or kind is collections.OrderedDict:
        return kind((key, each(value)) for key, value in obj.items())
    return obj


def output_template(obj, tensor_type):
    """(template, bytes) of a forward's output; Uncacheable for a type whose copy we could
    not make (a shared mutable object would leak between calls)."""
    if isinstance(obj, tensor_type):
        copy = obj.detach().clone()
        return copy, copy.numel() * copy.element_size()
    if obj is None or type(obj) in (bool, int, float, str):
        return obj, 0
    kind = type(obj)
    if not (kind in (tuple, list, dict, collections.OrderedDict)
            or (isinstance(obj, tuple) and hasattr(obj, "_fields"))):
        raise Uncacheable(kind.__name__)
    total = 0

    def each(item):
        nonlocal total
        kept, size = output_template(item, tensor_type)
        total += size
        return kept

    return rebuild(obj, each), total


def signature(obj, tensor_type):
    """Hashable key of a call's arguments: tensors by shape, dtype and device; other values by
    type and repr when hashable and short; containers element by element."""
    if isinstance(obj, tensor_type):
        return (tuple(obj.shape), obj.dtype, obj.device)
    kind = type(obj)
    if kind is tuple or kind is list:
        return (kind.__name__, tuple(signature(item, tensor_type) for item in obj))
    if kind is dict:
        return ("dict", tuple((key, signature(value, tensor_type))
                              for key, value in sorted(obj.items(), key=lambda kv: repr(kv[0]))))
    try:
        hash(obj)
    except TypeError:
        raise Uncacheable(kind.__name__) from None
    text = repr(obj)
    if len(text) > MAX_REPR_CHARS:
        raise Uncacheable(kind.__name__)
    return (kind.__qualname__, text)



import torch
from torch.utils.data import DataLoader

train = DataLoader(dataset, batch_size=32, shuffle=True)  # dataloader-num-workers
val = DataLoader(dataset, batch_size=32, num_workers=0)  # dataloader-num-workers
ok = DataLoader(dataset, batch_size=32, **loader_kwargs)  # unknown: not flagged

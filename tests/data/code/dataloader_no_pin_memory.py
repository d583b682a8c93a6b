import torch
from torch.utils.data import DataLoader

device = "cuda"
loader = DataLoader(dataset, batch_size=32, num_workers=8, persistent_workers=True)

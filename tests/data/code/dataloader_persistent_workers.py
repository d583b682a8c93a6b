from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32, num_workers=8)

"""A well-written training script: stallscope doctor --code finds nothing here."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.backends.cudnn.benchmark = True
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.head = nn.Linear(16 * 30 * 30, 10)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))


def main():
    data = TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=4, pin_memory=True,
                        persistent_workers=True)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for epoch in range(3):
        running = torch.zeros((), device=device)
        for step, (x, y) in enumerate(loader):
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            running += loss.detach()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        print("epoch", epoch, "mean loss", (running / len(loader)).item())
        torch.save(model.state_dict(), "checkpoint.pt")


if __name__ == "__main__":
    main()

import torch

torch.cuda.empty_cache()
for epoch in range(10):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

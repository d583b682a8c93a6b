import torch

for step, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    torch.save(model.state_dict(), "last.pt")
    if step % 1000 == 0:
        torch.save(model.state_dict(), f"step{step}.pt")

for step, (x, y) in enumerate(loader):
    out = model(x)
    loss = criterion(out, y)
    with autocast():
        loss.backward()
    optimizer.step()
    print("step done")
    print(loss)
    print(f"step {step} loss {loss}")

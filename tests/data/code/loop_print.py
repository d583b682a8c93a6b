for step, (x, y) in enumerate(loader):
    out = model(x)
    loss = criterion(out, y)
    with autocast():
        loss.backward()
    optimizer.step()
    print("step done")
    print(loss)
    print(f"step {step} loss {loss}")
    print("shape", out.shape, loss.dtype, len(out), out.size(0))
    value = loss.item()
    print(f"loss {value:.3f}")
    if step % 100 == 0:
        print(loss)

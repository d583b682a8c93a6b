import numpy as np

preds = []
for x, y in loader:
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
    preds.append(out.argmax(1).cpu().numpy())
    labels = y.numpy()
    ids = y.tolist()
    host = out.to("cpu")

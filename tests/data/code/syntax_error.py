import torch

for x in loader
    pass

import torch
import torch.nn as nn

model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()

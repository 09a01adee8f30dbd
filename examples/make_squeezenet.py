"""Build ``examples/squeezenet1_1.onnx``: SqueezeNet 1.1 with random weights, exported by PyTorch.

The architecture is torchvision's ``squeezenet1_1`` (Iandola et al., 2016, version 1.1: a 3x3
stride-2 stem of 64 channels, eight Fire modules, three 3x3 stride-2 MaxPools with ceil_mode,
a 1x1 classifier convolution to 1000 classes, ReLU and global average pooling), written out
here so torchvision is not needed; the weights are random (seed 0, torchvision's
initialisation), so the model is a realistic graph for timing, not a classifier. Its only
max-family nodes are the windowed MaxPools, which OffloadSession leaves to onnxruntime for
now.

torch is not a dependency of maxaccel. Regenerate in a separate environment::

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 onnx
    /tmp/torchenv/bin/python examples/make_squeezenet.py

The model is written with IR version 10, which onnxruntime 1.17 and later read.
"""

import pathlib

import onnx
import torch
from torch import nn

PATH = pathlib.Path(__file__).with_name("squeezenet1_1.onnx")


class Fire(nn.Module):
    """Squeeze (1x1) then expand (1x1 and 3x3 side by side, concatenated), each with ReLU."""

    def __init__(self, inplanes, squeeze, expand1x1, expand3x3):
        super().__init__()
        self.squeeze = nn.Conv2d(inplanes, squeeze, kernel_size=1)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, kernel_size=1)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, kernel_size=3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.relu(self.squeeze(x))
        return torch.cat([self.relu(self.expand1x1(x)), self.relu(self.expand3x3(x))], 1)


class SqueezeNet11(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=3, stride=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        )
        final_conv = nn.Conv2d(512, num_classes, kernel_size=1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.5), final_conv, nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d((1, 1)))
        # torchvision's initialisation.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                if module is final_conv:
                    nn.init.normal_(module.weight, mean=0.0, std=0.01)
                else:
                    nn.init.kaiming_uniform_(module.weight)
                nn.init.constant_(module.bias, 0)

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


def main():
    torch.manual_seed(0)
    model = SqueezeNet11().eval()
    example = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (example,), str(PATH), input_names=["input"],
                      output_names=["logits"], opset_version=18, dynamo=False)
    exported = onnx.load(PATH)
    exported.ir_version = 10
    exported.producer_name = "maxaccel examples (PyTorch " + torch.__version__ + ")"
    onnx.checker.check_model(exported, full_check=True)
    onnx.save(exported, PATH)
    print(f"wrote {PATH} ({PATH.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()

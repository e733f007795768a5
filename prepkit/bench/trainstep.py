"""The training step of the R/S protocol (``prepkit.bench.gpu``): a ResNet-50-sized model.

torchvision's ``resnet50`` is used when torchvision is installed; otherwise ``resnet50_like``
builds the same architecture (bottleneck blocks 3-4-6-3, widths 256-2048, about 25.6 M
parameters) from torch layers, so the step costs what a ResNet-50 step costs. ``tiny_net``
is for the reduced mode under the CUDA simulator, where only the protocol is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _bottleneck(torch_nn: Any, inputs: int, width: int, stride: int) -> Any:
    """One bottleneck block: 1x1 -> 3x3 (stride) -> 1x1 (4x width), identity or projection shortcut."""
    nn = torch_nn

    class Bottleneck(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            out = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
            )
            self.shortcut = (nn.Identity() if stride == 1 and inputs == out else
                             nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out)))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + self.shortcut(x))

    return Bottleneck()


def resnet50_like(num_classes: int = 1000) -> Any:
    """A ResNet-50 (v1.5: stride on the 3x3 convolution) built from torch.nn layers."""
    from torch import nn

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1)]
    inputs = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for number in range(blocks):
            layers.append(_bottleneck(nn, inputs, width, stride if number == 0 else 1))
            inputs = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, num_classes)]
    return nn.Sequential(*layers)


def tiny_net(num_classes: int = 10) -> Any:
    """Two layers: enough to run the protocol under the simulator."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, num_classes))


def make_model(kind: str, num_classes: int) -> tuple[Any, str]:
    """(model, description): ``kind`` is "resnet50" (torchvision's when installed) or "tiny"."""
    if kind == "tiny":
        return tiny_net(num_classes), "tiny conv net (simulator)"
    if kind != "resnet50":
        raise ValueError(f"Expected model 'resnet50' or 'tiny'. Got {kind!r}.")
    try:
        from torchvision.models import resnet50

        return resnet50(num_classes=num_classes), "torchvision resnet50"
    except ImportError:
        return resnet50_like(num_classes), "resnet50-like (torch.nn, torchvision absent)"


def make_step(model: Any, device: str) -> Callable[[Any, Any], None]:
    """One SGD training step (forward, cross-entropy, backward, update) on ``device``.

    On CUDA the step runs in bfloat16 autocast with channels-last memory, as ResNet-50 is
    trained on recent GPUs: the faster the step, the harder it is for the input to keep up.
    """
    import torch

    model.to(device)
    cuda = device.startswith("cuda")
    if cuda:
        model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_function = torch.nn.CrossEntropyLoss()

    def step(images: Any, labels: Any) -> None:
        if cuda:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            loss = loss_function(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def parameter_count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))

"""Train a small classifier from a prepkit store with prepkit.Reader (CPU or GPU, DDP-ready).

    prepkit shard samples/photos out/photos --layout lossless
    python recipes/train_with_reader.py out/photos --epochs 2 [--device cuda]
    torchrun --nproc-per-node 2 recipes/train_with_reader.py out/photos   # DDP: ranks from the env

Shows what a training script needs: set_epoch every epoch, the same number of batches on
every rank, checkpointing the reader's state_dict to resume mid-epoch.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import prepkit
from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--checkpoint", default=None, help="reader state to resume from / save to")
    args = parser.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        torch.distributed.init_process_group("nccl" if args.device == "cuda" else "gloo")
    store = prepkit.open_store(args.store)
    reader = prepkit.Reader(
        store, args.batch_size, seed=0, rank=rank, world_size=world, device=args.device, output="torch",
        transforms=[RandomResizedCrop(args.size), RandomHorizontalFlip(), ToDtype("float32", scale=True),
                    Normalize(IMAGENET_MEAN, IMAGENET_STD)],
    )
    classes = len(store.class_names or []) or 1
    device = torch.device(args.device)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes)).to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        reader.load_state_dict(state["reader"])
        start_epoch = reader.epoch + (1 if reader.epoch_finished else 0)
    for epoch in range(start_epoch, args.epochs):
        if epoch != reader.epoch:
            reader.set_epoch(epoch)
        total, seen = 0.0, 0
        for batch in reader:
            loss = nn.functional.cross_entropy(model(batch.images), batch.labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            seen += len(batch)
            if args.checkpoint and rank == 0:
                torch.save({"reader": reader.state_dict()}, args.checkpoint)
        print(f"rank {rank} epoch {epoch}: {len(reader)} batches, {seen} samples, mean loss {total / max(seen, 1):.3f}")


if __name__ == "__main__":
    main()

"""PyTorch's cross-entropy with label smoothing, for lmtrain's reference tests
(tests/reference/test_loss_reference.cpp): reads logits [N, V] (f64) and labels [N] (i32) from a
file, writes each row's loss (reduction "none", ignore_index -100) and the gradient of
grad_scale * their sum with respect to the logits, all float64, little-endian.
    loss_reference.py IN OUT N V LABEL_SMOOTHING GRAD_SCALE
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main():
    src, dst, n, v, eps, scale = sys.argv[1:7]
    n, v, eps, scale = int(n), int(v), float(eps), float(scale)
    raw = open(src, "rb").read()
    logits = np.frombuffer(raw[: n * v * 8], dtype="<f8").reshape(n, v)
    labels = np.frombuffer(raw[n * v * 8 :], dtype="<i4")
    x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(labels.astype(np.int64))
    losses = F.cross_entropy(x, y, ignore_index=-100, label_smoothing=eps, reduction="none")
    (losses.sum() * scale).backward()
    out = np.concatenate([losses.detach().numpy().ravel(), x.grad.numpy().ravel()])
    open(dst, "wb").write(out.astype("<f8").tobytes())


if __name__ == "__main__":
    main()

"""The PyTorch side of `cargo xtask bench --e2e` (issue 28 item 6).

Two modes:

- `gen --out FILE --lines N --seed S`: a Criteo-format TSV (label, 13
  integer counts, 26 hashed categorical tokens; empty = missing) from a
  planted model, so both sides train on the same bytes;
- `train --data FILE --model fm|deepfm ...`: the same model as `basis train
  --format criteo --model fm|deepfm` (docs/DATA.md, docs/CLI.md) in stock
  PyTorch, timed over parse + vocabulary + train + evaluation, printing one
  JSON line.

What is "the same": the loader's rules (file-order split 80/10/10, the
integers log-binned `v <= 2 -> v`, else `floor(ln(v)^2)`, one row per
distinct training feature, unseen validation/test features dropped), the
model (rows of `1 + k` values: a linear weight and a k-vector; FM = bias +
sum of weights + pairwise interactions; DeepFM adds a ReLU tower over the 39
concatenated field vectors, zero for a missing field), the optimizers
(`adam` = Adam on the touched rows, `torch.optim.SparseAdam`; the tower and
bias with `torch.optim.Adam(fused=True)`), the batch, the epoch count, the
initial scale (rows N(0, init_std) for the vector part, linear weights 0).
Initial values and batch order are drawn by each side's own generator, so
test AUCs agree to noise, not to the bit.
"""

import argparse
import json
import math
import sys
import time

import numpy as np

N_INT, N_CAT = 13, 26


def gen(out, lines, seed):
    rng = np.random.default_rng(seed)
    # Criteo-like cardinalities: a few large fields, many small.
    cards = [3, 5, 10, 30, 100, 300, 1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000]
    cards = [cards[i % len(cards)] for i in range(N_CAT)]
    w = [rng.normal(0, 0.4, c) for c in cards]
    latent = [rng.normal(0, 0.5, (c, 4)) for c in cards]
    ids = np.empty((lines, N_CAT), dtype=np.int64)
    for f, c in enumerate(cards):
        ids[:, f] = (rng.zipf(1.2, lines) - 1) % c
    logit = np.full(lines, -0.8)
    vsum = np.zeros((lines, 4))
    for f in range(N_CAT):
        logit += w[f][ids[:, f]]
        v = latent[f][ids[:, f]]
        vsum += v
        logit -= 0.5 * (v * v).sum(1)
    logit += 0.5 * (vsum * vsum).sum(1)
    ints = np.floor(np.exp(rng.normal(1.5, 1.5, (lines, N_INT)))).astype(np.int64)
    logit += 0.1 * np.log1p(ints[:, :3]).sum(1) - 0.3
    missing = rng.random((lines, N_INT)) < 0.05
    label = (rng.random(lines) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    salt = [(f * 0x9E3779B1 + 12345) & 0xFFFFFFFF for f in range(N_CAT)]
    with open(out, "w") as fh:
        for i in range(lines):
            row = [str(label[i])]
            row += ["" if missing[i, j] else str(ints[i, j]) for j in range(N_INT)]
            row += ["%08x" % ((int(ids[i, f]) * 2654435761 + salt[f]) & 0xFFFFFFFF) for f in range(N_CAT)]
            fh.write("\t".join(row) + "\n")


def int_bin(s):
    v = int(s)
    return v if v <= 2 else int(math.floor(math.log(v) ** 2))


def load(path, valid_frac=0.1, test_frac=0.1):
    """Rows as [n, 39] int64 feature ids (0 = missing/unseen) + labels."""
    labels, toks = [], []
    with open(path) as fh:
        for line in fh:
            c = line.rstrip("\n").split("\t")
            if len(c) != 1 + N_INT + N_CAT:
                raise SystemExit(f"malformed line: {len(c)} columns")
            labels.append(int(c[0]))
            toks.append([None if s == "" else int_bin(s) for s in c[1 : 1 + N_INT]] + [s or None for s in c[1 + N_INT :]])
    n = len(labels)
    n_test = int(round(n * test_frac))
    n_valid = int(round(n * valid_frac))
    n_train = n - n_valid - n_test
    vocab = [dict() for _ in range(N_INT + N_CAT)]
    next_id = 1  # 0 is the zero (missing / unseen) row
    ids = np.zeros((n, N_INT + N_CAT), dtype=np.int64)
    for i, t in enumerate(toks):
        row = ids[i]
        for f, tok in enumerate(t):
            if tok is None:
                continue
            d = vocab[f]
            j = d.get(tok)
            if j is None and i < n_train:
                j = d[tok] = next_id
                next_id += 1
            if j is not None:
                row[f] = j
    y = np.asarray(labels, dtype=np.float32)
    cut = [0, n_train, n_train + n_valid, n]
    return ids, y, cut, next_id


def auc(y, p):
    """Mann-Whitney AUC with tied scores sharing their average rank."""
    order = np.argsort(p, kind="mergesort")
    sp = p[order]
    starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]])
    ends = np.r_[starts[1:], len(sp)]
    mean_rank = (starts + 1 + ends) / 2.0  # ranks start..end-1 (1-based) averaged
    ranks = np.empty(len(p))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    pos = y > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def train(a):
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    ids, y, cut, rows = load(a.data)
    t_load = time.perf_counter() - t0
    k = a.dim
    fields = N_INT + N_CAT
    emb = torch.nn.Embedding(rows, 1 + k, sparse=True, padding_idx=0)
    with torch.no_grad():
        emb.weight[:, 0] = 0.0
        emb.weight[:, 1:].normal_(0.0, a.init_std)
        emb.weight[0] = 0.0
    bias = torch.nn.Parameter(torch.zeros(1))
    dense = [bias]
    tower = None
    if a.model == "deepfm":
        widths = [fields * k] + [int(w) for w in a.mlp.split(",")]
        layers = []
        for i in range(len(widths) - 1):
            layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(torch.nn.ReLU())
        tower = torch.nn.Sequential(*layers)
        if a.tower_init == "he":
            # ours: W ~ N(0, 2/fan_in), the last layer N(0, 1/fan_in), biases 0
            lin = [m for m in tower if isinstance(m, torch.nn.Linear)]
            with torch.no_grad():
                for i, m in enumerate(lin):
                    gain = 1.0 if i + 1 == len(lin) else 2.0
                    m.weight.normal_(0.0, (gain / m.in_features) ** 0.5)
                    m.bias.zero_()
        dense += list(tower.parameters())
    sparse_opt = torch.optim.SparseAdam(emb.parameters(), lr=a.lr)
    dense_lr = a.dense_lr if a.dense_lr is not None else (0.001 if tower is not None else 0.01)
    dense_opt = torch.optim.Adam(dense, lr=dense_lr, fused=True)
    X = torch.from_numpy(ids)
    Y = torch.from_numpy(y)

    def logits(xb):
        e = emb(xb)  # [b, fields, 1 + k]
        lin = e[:, :, 0].sum(1)
        v = e[:, :, 1:]
        s = v.sum(1)
        fm = 0.5 * (s * s - (v * v).sum(1)).sum(1)
        out = bias + lin + fm
        if tower is not None:
            out = out + tower(v.reshape(v.shape[0], -1)).squeeze(1)
        return out

    def evaluate(lo, hi):
        with torch.no_grad():
            ps = [torch.sigmoid(logits(X[i : min(i + 4096, hi)])) for i in range(lo, hi, 4096)]
        return auc(y[lo:hi], torch.cat(ps).numpy())

    loss_fn = torch.nn.BCEWithLogitsLoss()
    t1 = time.perf_counter()
    n_train = cut[1]
    g = torch.Generator().manual_seed(a.seed)
    for _ in range(a.epochs):
        perm = torch.randperm(n_train, generator=g)
        for i in range(0, n_train, a.batch):
            b = perm[i : i + a.batch]
            loss = loss_fn(logits(X[b]), Y[b])
            sparse_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
        valid_auc = evaluate(cut[1], cut[2])
    t_train = time.perf_counter() - t1
    test_auc = evaluate(cut[2], cut[3])
    t_all = time.perf_counter() - t0
    print(json.dumps({
        "peer": "torch " + torch.__version__,
        "model": a.model,
        "threads": a.threads,
        "rows": rows - 1,
        "train": n_train,
        "load_secs": t_load,
        "train_secs": t_train,
        "wall_secs": t_all,
        "valid_auc": valid_auc,
        "test_auc": test_auc,
    }))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--out", required=True)
    g.add_argument("--lines", type=int, default=500_000)
    g.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--model", choices=["fm", "deepfm"], default="fm")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--dim", type=int, default=16)
    t.add_argument("--mlp", default="512,256,1")
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--lr", type=float, default=0.001)
    t.add_argument("--dense-lr", type=float, default=None)
    t.add_argument("--init-std", type=float, default=0.01)
    t.add_argument("--tower-init", choices=["torch", "he"], default="torch")
    t.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.cmd == "gen":
        gen(a.out, a.lines, a.seed)
    else:
        train(a)


if __name__ == "__main__":
    sys.exit(main())

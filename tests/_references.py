"""Reference quantities shared by the brute-force curvature tests."""

import torch

DT = torch.float64


def ref_lambda(lik, f, out_scale):
    """Λ_n (C, C) of one row, rows and columns scaled by out_scale."""
    if lik == "categorical":
        p = torch.softmax(f, 0)
        lam = torch.diag(p) - torch.outer(p, p)
    elif lik == "bernoulli":
        p = torch.sigmoid(f)
        lam = (p * (1 - p)).reshape(1, 1)
    elif lik == "multilabel":  # one independent sigmoid per output
        p = torch.sigmoid(f)
        lam = torch.diag(p * (1 - p))
    else:
        lam = torch.eye(f.numel(), dtype=DT)
    return out_scale[:, None] * lam * out_scale[None, :]


def random_targets(lik, n_rows, n_out, generator):
    """Targets of a likelihood: class indices, 0/1 floats, an (n, C) 0/1 indicator or (n, C)
    Gaussian values."""
    if lik == "categorical":
        return torch.randint(0, n_out, (n_rows,), generator=generator)
    if lik == "bernoulli":
        return torch.randint(0, 2, (n_rows,), generator=generator).to(DT)
    if lik == "multilabel":
        return torch.randint(0, 2, (n_rows, n_out), generator=generator).to(DT)
    return torch.randn(n_rows, n_out, generator=generator, dtype=DT)

"""The evidence of a refined posterior (``refine``), and δ, σ tuned at the refined mode.

Refinement (:mod:`.refine`) moves the posterior to the mode θ_glm of the linearized
model f_lin(x; θ) = f(x; θ*) + J(x)(θ − θ*) (``"laplace"``; ``"vi"`` to a variational
Gaussian around it).  Its evidence is the GLM's Laplace evidence at θ_glm, for either
method (DIGEST §1.3 with f_lin and the GGN at θ_glm):

    log Z(δ, σ) = log p(y | f_lin(θ_glm)) − ½ θ_glmᵀ D θ_glm + ½ log det D
                  − ½ log det(s·H(θ_glm) + D),

what ``log_evidence_`` reports and ``log_evidence`` evaluates with refinement: not
the evidence at the trained weights θ*, which are not the mode of the posterior that
predicts (on Bayesian linear regression −579.9 at θ* against the exact −44.9).

With ``hyperparameter_tuning="evidence"`` δ (and σ) are tuned at the refined mode,
which moves with them: tune → refine → re-tune until δ and σ stop moving
(:data:`MAX_ROUNDS`, :data:`RTOL`), MacKay's alternation.  Each round maximizes
log Z at a fixed mode; at a fixed point the mode is that of the final (δ, σ) and, by
the envelope theorem (the mode maximizes the log joint, so its move does not change
the log joint to first order), the gradient of this objective is that of the
evidence at the moving mode.  For a linear model with a Gaussian likelihood the GGN
does not depend on θ and the Laplace evidence at the exact mode is the exact
marginal likelihood, so the fixed point is the exact type-II maximum likelihood
(``tests/test_refine.py`` checks it against the closed form).  For other
likelihoods the GGN moves with the mode, which this first-order argument leaves out.
``"vi"`` runs once, at the final δ and σ: its mean is no mode and moves with the
quasi-Monte Carlo expectations (alternating with it did not settle on a classifier).
"""

import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from .evidence import Evidence
from .prior import subset_prior
from .refine import refine_posterior

#: Rounds of tune → refine, and the largest change of log δ, log σ that ends them.
MAX_ROUNDS = 50
RTOL = 1e-7


def _refine_at(method, base, structure, likelihood, X, y, weight, n_out, vector_sigma,
               rebuild, prior, sigma, scale_of, temperature, seed, log):
    """Refinement by ``method`` at the whole-net ``prior`` and ``sigma``: (subset,
    posterior, info, the GLM's Laplace evidence at the refined mean)."""
    delta = subset_prior(prior, base)
    out_scale = ((1.0 / sigma).to(X.device) if vector_sigma
                 else torch.ones(n_out, dtype=torch.float64, device=X.device))
    refined, posterior, info = refine_posterior(
        method, structure, base, likelihood, X, y, weight, delta, scale_of(sigma), out_scale,
        n_out, random_state=seed, log=log)
    evidence = Evidence.at_fit(info.pop("curvature"), info.pop("theta"), likelihood,
                               info.pop("outputs"), y, weight, temperature, "ggn",
                               rebuild=rebuild)
    return refined, posterior, info, evidence


def _log_change(prior, new_prior, sigma, new_sigma):
    change = np.abs(np.log(np.asarray(new_prior, dtype=float))
                    - np.log(np.asarray(prior, dtype=float)))
    if sigma is not None:
        change = np.append(change, np.abs(np.log(new_sigma.cpu().numpy())
                                          - np.log(sigma.cpu().numpy())))
    return float(np.max(change))


def refine_and_tune(method, base, structure, likelihood, X, y, weight, n_out, prior, sigma,
                    vector_sigma, rebuild, *, scale_of, tune, temperature, seed, log):
    """Refine at (``prior``, ``sigma``) and, with ``tune`` (a function (evidence, σ) →
    (whole-net prior, σ) maximizing the evidence), alternate evidence tuning at the
    refined mode and refinement to a fixed point (module docstring). ``scale_of(σ)``:
    the curvature scale; ``seed``: the quasi-Monte Carlo draws of ``"vi"``.

    The evidence (and the tuning) is that of the GLM's mode for either method; ``"vi"``
    runs once, at the final δ and σ, for the posterior that predicts.

    Returns (whole-net prior, σ tensor, refined subset, posterior, info, evidence).
    """
    def step(p, s, how="laplace"):
        return _refine_at(how, base, structure, likelihood, X, y, weight, n_out,
                          vector_sigma, rebuild, p, s, scale_of, temperature, seed, log)

    result = step(prior, sigma)
    rounds = 0
    while tune is not None:
        rounds += 1
        new_prior, new_sigma = tune(result[3], sigma)
        moved = _log_change(prior, new_prior, sigma if likelihood.has_noise else None, new_sigma)
        prior, sigma = new_prior, new_sigma
        result = step(prior, sigma)
        if moved <= RTOL:
            log(f"refine: δ (and σ) at the refined mode after {rounds} rounds")
            break
        if rounds == MAX_ROUNDS:
            warnings.warn(
                f"refine={method!r} with evidence tuning: δ (and σ) still moved by "
                f"{moved:.2g} (log scale) after {MAX_ROUNDS} rounds of tuning at the refined "
                "mode and refining; the last values are used.", ConvergenceWarning)
            break
    if method == "vi":
        result = (*step(prior, sigma, "vi")[:3], result[3])
    return (prior, sigma, *result)

"""torch's Adam and L-BFGS for the default MLP, without their first-use import of TorchDynamo.

``torch.optim`` guards ``add_param_group`` and ``zero_grad`` with ``torch._disable_dynamo``
and Adam's ``step`` with ``_use_grad_for_differentiable``: wrappers that import
``torch._dynamo`` the first time they run, so that a compiled training loop does not trace
them. That import is the largest part of a process's first fit (``python -m benchmarks
coldstart``; about 1 s on a quiet machine, more than the fit itself). sklaplace trains
eagerly (skorch's ``compile`` compiles the module, not the optimizer), where the wrappers
call the method itself; these subclasses call it directly. The arithmetic is torch's, the
same tensors bit for bit (``tests/test_cold_start.py``), but L-BFGS's algebra runs in
float64 (:class:`LBFGS`). Nothing of torch is changed: the
classes serve only the default MLP; a skorch net of your own keeps its optimizer.
"""

import torch


def _unwrapped(method):
    """The method under torch's dynamo-disabling wrapper (the method if it has none)."""
    return getattr(method, "__wrapped__", method)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` without the first-use import of ``torch._dynamo`` (module doc)."""

    add_param_group = _unwrapped(torch.optim.Optimizer.add_param_group)
    zero_grad = _unwrapped(torch.optim.Optimizer.zero_grad)
    _step = _unwrapped(torch.optim.Adam.step)

    def step(self, closure=None):
        """One Adam step (torch's), with autograd as ``_use_grad_for_differentiable`` sets it."""
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return self._step(closure)


class LBFGS(torch.optim.LBFGS):
    """``torch.optim.LBFGS`` without the first-use import of ``torch._dynamo`` (module doc),
    its directions, curvature pairs and line search in float64 (the parameters keep their
    dtype; on float64 parameters it is torch's, bit for bit)."""

    add_param_group = _unwrapped(torch.optim.Optimizer.add_param_group)
    zero_grad = _unwrapped(torch.optim.Optimizer.zero_grad)

    def _gather_flat_grad(self):
        # the strong-Wolfe line search squares directional derivatives: in float32 they
        # overflow beyond ~1e19 (unscaled features of ~1e4 and up) and the step turns NaN
        return super()._gather_flat_grad().to(torch.float64)

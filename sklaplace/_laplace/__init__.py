"""sklaplace's internals: the Laplace approximation behind the estimators.

Private (no stability promise): weight subsets, curvature, posterior structures, the
evidence and its tuning, the held-out grid, online tuning, continual learning, GLM
refinement, the default MLP and the MAP objective. The public surface is
``sklaplace`` (the estimators, the distributions), ``sklaplace.metrics``,
``sklaplace.ood`` and ``sklaplace.plotting``.
"""

"""LaplaceRegressor: a neural network regressor with a Laplace posterior."""

from sklearn.base import RegressorMixin, _fit_context

from ._base import BaseLaplace, keeps_state_on_failure
from ._continual import RegressorPartialFit
from .._laplace.workflow import torch_entry_point
from ._regressor_noise import RegressorNoise
from ._regressor_predictive import RegressorPredictive
from ._threads import thread_policy
from ._validation import REGRESSOR_CONSTRAINTS


class LaplaceRegressor(RegressorMixin, RegressorPredictive, RegressorNoise, RegressorPartialFit,
                       BaseLaplace):
    """Neural network regressor with a Laplace approximation posterior.

    Trains a skorch net to the MAP of a Gaussian likelihood (the prior as
    weight decay), fits a Gaussian posterior around it and predicts with the
    closed-form linearized (GLM) predictive N(f(x), J Σ Jᵀ + σ²).

    Parameters
    ----------
    net : skorch NeuralNet, FrozenEstimator or None, default=None
        The network. ``None`` builds a tanh MLP sized from the data
        (``hidden_layer_sizes``, trained with Adam). A skorch net (criterion
        ``MSELoss``) is copied and trained to the MAP inside ``fit``
        (``self.net`` is never mutated);
        ``FrozenEstimator(trained_net)`` keeps its weights and fits only the LA.
    hidden_layer_sizes : "auto", tuple of int or list of tuples, default="auto"
        Hidden widths of the default MLP (``net=None`` only). ``"auto"``:
        chosen among ``()`` (the linear model), ``(50,)`` and ``(50, 50)`` (a
        list of tuples: those), each trained and tuned on ``1 −
        validation_fraction`` of the rows, by the held-out rows' NLL (the
        evidence with under 10 held out), then refit as one architecture.
        ``partial_fit`` takes ``(50,)``. A tuple: no selection.
    max_epochs : int, default=200
        Training epochs of the default MLP.
    lr : float, default=1e-2
        Adam learning rate of the default MLP.
    batch_size : int or "auto", default="auto"
        Mini-batch size of the default MLP. ``"auto"``: 128 rows, or ⌈N/16⌉ for
        N above 2,048 training rows (at most 16 Adam steps an epoch): a batch
        that grows with N keeps the minibatch noise, which grows as lr·N/batch,
        from leaving the net ever farther from its MAP, and epochs cheap. A
        nearly noise-free target can need the steps of a smaller batch.
    tol : float or None, default=1e-4
        Convergence of MAP training, as in ``MLPClassifier``: training stops
        when the per-epoch training loss (the MAP objective, likelihood and
        prior) has not improved on its best value by at least ``tol`` for
        ``n_iter_no_change`` consecutive epochs; a ``ConvergenceWarning`` when
        ``max_epochs`` ends it first. After an online update of the prior (and
        σ) the next epoch's loss is the new reference. ``None``: always
        ``max_epochs`` epochs, no warning. Applies to a given skorch net too.
    n_iter_no_change : int, default=10
        Epochs without an improvement of ``tol`` that end training.
    solver : {"adam", "lbfgs"}, default="adam"
        Optimizer of the default MLP: minibatch Adam (``lr``, ``batch_size``),
        or full-batch L-BFGS with a strong Wolfe line search (one iteration per
        epoch; ``lr`` and ``batch_size`` unused): deterministic, so integer
        row weights equal duplicated rows where no rows are drawn either
        (``sample_weight`` of ``fit``).
    prior_precision : float or array-like, default=1.0
        Precision δ of the prior N(0, δ⁻¹I): a float, one value per parameter
        tensor (weight and bias of each layer) or one per parameter. It is the
        prior of MAP training and the start of evidence tuning.
    prior_structure : {"scalar", "layerwise", "diag"}, default="scalar"
        Granularity of the prior precision that evidence tuning uses.
    hyperparameter_tuning : {"auto", "evidence", "online", "cv"} or None, default="auto"
        How δ and σ are chosen; the result is in ``hyperparameter_tuning_``.
        ``"auto"``: ``"online"`` when it trains the net over all weights (for
        ``online_burn_in + online_frequency`` epochs at least, an int F) with a
        scalar ``sigma_noise``, else ``"evidence"`` (the choice and its
        scoreboard: the user guide's defaults page).
        ``"evidence"``: maximise the Laplace log evidence after training,
        bounded to log10 δ ∈ [−4, 4] (warns at a bound). ``"online"``: Immer et
        al. (2021) Alg. 1 during training (all weights). ``None``: keep the
        given values (use this in GridSearchCV over ``prior_precision``).
        ``"cv"``: fit the network and the LA on ``1 − validation_fraction`` of
        the rows, choose the scalar δ and σ by the NLL of the predictive (the
        GP's with ``pred_type="gp"``; the sampled net's, over whole decades,
        with ``"nn"``) on the held-out rest (Laplace Redux's
        "CV" method), then continue training the net on all rows from where it
        stopped (a warm start, with the given ``prior_precision`` and
        ``sigma_noise``, as without tuning) and fit the
        LA there with the chosen values (as scikit-learn's ``*CV`` estimators
        with ``refit=True``). The grid is over ρ = δ / s(σ), the ratio the
        posterior's shape depends on (s the curvature scale: 1/(σ²T) for the
        GGN, 1/(σ⁴T) for the empirical Fisher): log10 ρ ∈ [−4, 4] in quarter
        decades, the best σ for each ρ, and the smallest ρ (the broadest
        posterior) within one paired standard error and 0.002 nats of the
        smallest NLL, warning at a grid bound; δ = ρ·s(σ) (model units) can lie
        outside [1e-4, 1e4].
    validation_fraction : float, default=0.2
        Share of the rows held out by ``hyperparameter_tuning="cv"``
        (stratified for classification), as in scikit-learn's MLP.
    model_averaging : bool, default=False
        With several candidates (``hidden_layer_sizes`` "auto" or a list),
        ``True`` predicts with the mixture of their predictives, weighted by
        stacking: the weights on the simplex that maximise the held-out rows'
        log-likelihood of the mixture (with under 10 held out, the evidence's
        model probabilities); each of weight ≥ 1e-3 is refit on all rows.
    subset_of_weights : {"auto", "all", "last_layer", "subnetwork"}, default="auto"
        The weights under the LA. ``"auto"`` (with ``hessian_structure="auto"``):
        all weights with the full structure when its curvature and
        eigendecomposition are estimated within 2 s (N·C·P² + 10·P³ flops, or
        the kernel's when N·C < P, at 2·10¹⁰ flop/s), else all weights
        Kronecker-factored for nets of ``nn.Linear`` layers, else the last
        layer (full up to 2,000 weights, else kron; all weights with the
        diagonal where the output is not f = W φ(x) + b of a last layer that
        φ does not read). With an explicit
        ``hessian_structure="full"``: all weights up to 5,000 parameters.
        ``"all"`` with ``hessian_structure="auto"``: full under the same
        estimate, else kron for nets of ``nn.Linear`` layers, else diag.
        ``hyperparameter_tuning="online"`` updates on the LA ``"all"`` picks;
        where the final LA differs (the last layer of a net not made of
        ``nn.Linear`` layers), δ (and σ) are re-tuned on its evidence.
    hessian_structure : {"auto", "full", "diag", "kron", "lowrank"}, default="auto"
        Structure of the curvature and the posterior. ``"auto"``: as described
        under ``subset_of_weights``, with the diagonal where Kronecker factors
        cannot hold the settings (``refine``, ``prior_structure="diag"`` or a
        ``prior_precision`` that varies within a weight tensor).
    subnetwork : int, list of str or None, default=None
        With ``subset_of_weights="subnetwork"``: the number S of weights of
        largest marginal variance under a diagonal LA, or parameter names.
    lowrank_rank : int or None, default=None
        Rank k of ``"lowrank"``; ``None`` uses min(P, 100).
    curvature : {"ggn", "ef"}, default="ggn"
        Generalized Gauss-Newton or empirical Fisher.
    pred_type : {"glm", "nn", "gp"}, default="glm"
        Linearized (GLM) predictive; sampling weights and running the net; or
        ``"gp"``, the functional Laplace of the GLM paper (§3.5): a GP with
        kernel J(x) δ⁻¹ J(x')ᵀ on ``gp_subset_size`` training rows (each
        standing for N/M rows), whose predictive uses the full curvature of
        those rows whatever ``hessian_structure`` is (that one still gives the
        evidence and the tuning). With all rows it equals the full GLM
        predictive.
    gp_subset_size : int or None, default=None
        M, the training rows of ``pred_type="gp"`` (a random subset drawn from
        ``random_state``); None: all rows.
    n_samples : int, default=100
        Samples of ``pred_type="nn"``.
    extrapolation_variance : "auto", float >= 0 or None, default="auto"
        Scale σ² of a variance added to every output of the GLM predictive
        (``pred_type`` "glm" or "gp") outside the training inputs' range:
        ``σ²·mean_i |e_i|³/3``, e_i how far feature i lies beyond the training
        rows' range in training standard deviations — the prior of infinitely
        many ReLU features beyond the data (Kristiadi, Hein & Hennig 2021),
        zero on the training range, growing cubically beyond. ``"auto"``: the
        largest σ² of a grid (1e-2 to 1e3) whose cost to a new row from the
        training distribution, estimated by the jackknife (each training row
        that alone extends the range, at its distance beyond the others'),
        stays within 0.002 nats of the best, where a classifier's fit tunes
        the prior (0 for the regressor, with ``hyperparameter_tuning=None``,
        ``pred_type="nn"``, ``refine``); later ``partial_fit`` tasks keep the
        first's, over every task's range. A float: that σ² (model units); 0 or
        None: none. Not a weight: not in ``posterior_`` nor the sampled net's.
    temperature : float, default=1.0
        The log-likelihood is divided by T in the MAP objective, the curvature
        and the evidence.
    refine : {"laplace", "vi"} or None, default=None
        GLM posterior refinement (Immer et al. 2021, §3.2): inference in the
        linearized model f(x; θ*) + J(x)(θ − θ*), whose log joint is convex, on
        the training Jacobians computed once and cached (refused, with a
        ``MemoryError``, above 2 GiB of N·C·P floats).
        ``"laplace"``: the GLM's mode by L-BFGS and the Laplace approximation
        there (its exact Hessian); ``"vi"``: Gaussian variational inference in
        the GLM by natural-gradient steps from the Laplace-GGN posterior. Full or
        diagonal (``hessian_structure``; "auto" takes the diagonal where it
        would take kron), GGN curvature, ``pred_type`` "glm" or
        "nn"; δ is the GLM's prior (``hyperparameter_tuning`` "auto" means
        "evidence" or "online"; "cv", classifier only, scores the refined
        predictive on whole decades of δ), and the predictive mean moves to
        the refined one. ``None``: the Laplace-GGN posterior at θ*.
    sigma_noise : float or array-like, default=1.0
        Observation noise σ of MAP training and the start of tuning (one per
        output allowed); tuned by the evidence unless
        ``hyperparameter_tuning=None``. Like ``GaussianProcessRegressor``'s
        ``alpha``, it is in the units of the standardized target when
        ``normalize_y=True`` (1.0: noise as large as std(y)) and in the units
        of y otherwise. The fitted ``sigma_noise_`` is always in the units of y;
        the evidence tunes it within [1e-3, 10]·s per output, s the larger of
        std(y) (1 for a constant y, as it is standardized) and the RMS of the
        MAP's residuals (warning at a bound).
    noise : {"homoscedastic", "heteroscedastic"}, default="homoscedastic"
        The observation noise. ``"homoscedastic"``: one σ per output (``sigma_noise``).
        ``"heteroscedastic"``: a σ(x) per row that the network predicts (Immer et al. 2023): it
        outputs, per target, η₁ = μ/σ² and the log precision −log σ²; the LA covers both heads with
        the GGN of the Gaussian in natural parameters, the evidence tunes δ per head (η₁'s rows of
        the output layer, the log precision's, the rest: each a group within ``prior_structure``'s,
        ``prior_precision_`` one value per parameter; not with Kronecker factors), and the
        predictive is N(μ(x), Var μ(x) + σ²(x)): the GLM's Gaussian over the outputs mapped to μ =
        η₁σ² linearized (the delta method), σ²(x) that of the MAP;
        ``predict_dist(X).aleatoric_var`` is σ²(x), ``epistemic_var`` Var μ(x). ``sigma_noise``
        must stay 1.0 and ``sigma_noise_`` is not set; not with ``refine``, ``pred_type="nn"``
        (the sampled nets' mean η₁σ² is heavy-tailed), ``model_averaging`` nor ``partial_fit``
        (each a ``ValueError``). With ``normalize_y=False`` the natural parameters train in the
        units of y, and a fit whose targets' root mean square lies outside [0.01, 100] warns:
        its predictions can be orders of magnitude off. The default MLP trains the mean alone
        (one σ), then both heads from there: the variance cannot take up what the mean should
        fit; with several ``hidden_layer_sizes`` it is the default's fit and choice
        (``model_selection_results_``: the one-σ means'). A skorch net needs the criterion
        ``sklaplace.nets.HeteroscedasticGaussianNLLLoss``.
    normalize_y : bool, default=True
        Standardize the targets internally, so that every scale-dependent
        setting (``sigma_noise``, ``prior_precision``, the σ floor of tuning)
        means the same whatever the units of y; predictions, std,
        distributions, ``sigma_noise_`` and the evidence are all in the
        original units. With ``False`` those settings are in the units of y.
        Ignored for a ``FrozenEstimator`` net, which predicts in the units it was
        trained on: those of y for a user's net (``sigma_noise`` is then in the
        units of y too); for the ``net_`` of a LaplaceRegressor fitted with
        ``normalize_y=True``, the standardized units of that fit (its mean and
        std of y, recorded on the net; ``sigma_noise`` is then in those units).
    online_frequency : int or "converged", default=5
        Online tuning: epochs F between hyperparameter updates, or ``"converged"``:
        an update at each convergence (``tol``), going on while it raises the
        evidence by ``tol`` per row, and one at the end (MacKay's alternation).
    online_burn_in : int, default=0
        Online tuning: epochs before the first update.
    online_steps : int or None, default=None
        Online tuning: None maximizes the evidence at every update (bounded
        L-BFGS-B over log δ and log σ, as post-hoc tuning: same optimum,
        about half the time of 100 steps); an int K takes K Adam steps on the
        log hyperparameters (Immer et al. 2021, Alg. 1).
    online_lr : float, default=0.1
        Online tuning: Adam learning rate of the K steps.
    online_curvature : {"every", "doubling"}, default="every"
        Online tuning: which updates compute the LA's curvature anew: each one
        (Immer et al. 2021), or (faster; on dask input each one) those after epochs
        ``online_burn_in`` + F, + 2F, + 4F, …, the others taking the evidence over
        the last curvature at the current weights and residuals.
    device : str or torch.device, default="cpu"
        Where the default MLP (``net=None``) trains, as skorch's ``device``
        ("cpu", "cuda", "cuda:1"). A skorch net keeps its own ``device`` (set it
        there); a ``FrozenEstimator``'s net stays where its parameters are. The
        Laplace approximation (curvature, decompositions, evidence tuning, the
        predictive) runs on the device of the trained net's parameters, in
        float64, and only the final arrays come back to the CPU as numpy.
    memory : None, str or joblib.Memory, default=None
        Caches the trained MAP network, keyed on the net, the training prior,
        the data, ``random_state`` and torch's default dtype: refits that
        change only Laplace parameters skip training (with a fixed
        ``random_state``). As any joblib cache it does not see a module class
        redefined under the same name (a re-run notebook cell) or a changed
        library: clear it then.
    random_state : int, RandomState or None, default=None
        Seeds initialization, batches and the prediction seed of MC draws.
    verbose : int, default=0
        0: silent. 1: one line per stage on stdout with its time (MAP
        training, saying on which rows; curvature, with the weights, structure
        and estimated time; tuning; refinement) and, on loops that run longer
        than 2 s (the MAP epochs, the refined held-out tuning), a progress bar
        on a terminal (tqdm), else a counter line every 5 s (no ANSI codes; the
        curvature's rows: a line every 2 s). 2: also skorch's epoch table of
        the default MLP.

    Attributes
    ----------
    n_iter_ : int
        Epochs the MAP training ran (of the last ``partial_fit`` task; for a
        ``FrozenEstimator`` net, of the history it came with; with
        ``hyperparameter_tuning_ == "cv"``, of the training continued on all rows
        after the held-out pass, whose epochs are not counted).
    loss_curve_ : ndarray of shape (`n_iter_`,)
        The training loss (MAP objective per row) of each epoch.
    laplace_ : object
        The immutable fitted Laplace approximation that prediction reads: the
        weights' subset, the posterior, the evidence, the hyperparameters and
        the fit's choices; the other fitted attributes are read off it. An
        internal object (no stability promise); use ``posterior_`` for the
        posterior over the weights.
    net_ : skorch NeuralNet
        The fitted network (the frozen one for ``FrozenEstimator``).
    prior_precision_ : float or ndarray
        Prior precision after tuning, in the form of ``prior_precision``.
    sigma_noise_ : float or ndarray
        Observation noise after tuning, in the units of y: one value per output when
        ``sigma_noise`` is, and also for multi-output y standardized by ``normalize_y``,
        where one σ of the standardized targets is σ·std(y_c) for output c.
    subset_of_weights_ : str
        What ``subset_of_weights`` resolved to (``"auto"``: see above).
    hyperparameter_tuning_ : str or None
        What ``hyperparameter_tuning`` resolved to (``"auto"``: see above).
    validation_nll_ : float
        ``"cv"`` only: mean held-out NLL at the chosen hyperparameters (model units).
    extrapolation_variance_ : float
        The σ² of the variance outside the training range in use (0: none).
    hessian_structure_ : str
        What ``"auto"`` resolved to.
    n_params_ : int
        Number of weights under the Laplace approximation.
    posterior_ : WeightPosterior
        The Gaussian posterior over those weights, at ``prior_precision_`` (a property:
        mean, covariance as a ``LinearOperator``, ``sample``, ``log_prob``, ``net_at``;
        see :class:`sklaplace.posterior.WeightPosterior`).
    log_evidence_ : float
        Laplace log marginal likelihood of the fit (in the units of y).
    evidence_history_ : list of dict
        Online tuning only: epoch, log_evidence, prior_precision (one value
        per parameter tensor; per weight with ``prior_structure="diag"``) and
        sigma_noise per update.
    n_tasks_ : int
        ``partial_fit`` only: the number of tasks (calls, a preceding ``fit``
        counting as one) the posterior has absorbed; ``log_evidence_`` is then
        the evidence of the last task given the earlier ones.
    refine_objective_init_ : float
        ``refine`` only: the GLM's log joint at θ* (``"laplace"``) or the ELBO
        of the Laplace-GGN posterior (``"vi"``), up to constants.
    refine_objective_ : float
        ``refine`` only: the same at the refined posterior.
    refine_n_iter_ : int
        ``refine`` only: L-BFGS and Newton-CG iterations, or natural-gradient steps.
    hidden_layer_sizes_ : tuple of int or None
        The fitted default MLP's hidden widths (None for a given ``net``).
    model_selection_results_ : dict of list or ndarray
        Several candidates only, ordered by capacity: ``hidden_layer_sizes``,
        ``n_params``, ``criterion``, ``held_out_nll``, ``log_evidence`` (at its
        optimal prior), ``fit_time``, ``training_prior_precision`` (of its MAP
        training), ``n_iter`` (its epochs), ``stopped_losing`` (stopped behind a
        smaller one), ``rank``; a ``ConvergenceWarning`` when the largest wins.
    model_weights_ : ndarray of shape (n_candidates,)
        ``model_averaging=True`` only: the weights, by ``model_selection_results_``
        row (0: not refit); ``net_``, ``laplace_`` … are the largest weight's.
    estimators_ : list of LaplaceRegressor
        ``model_averaging=True`` only: the candidates of non-zero weight, refit.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of str
        Names of the features seen during ``fit``; only with pandas input.

    See Also
    --------
    LaplaceClassifier : The classification counterpart.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sklaplace import LaplaceRegressor
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = LaplaceRegressor(max_epochs=20, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    """

    _likelihood_kinds = ("gaussian", "heteroscedastic")
    _parameter_constraints = REGRESSOR_CONSTRAINTS

    def __init__(self, net=None, *, hidden_layer_sizes="auto", max_epochs=200, lr=1e-2,
                 batch_size="auto", tol=1e-4, n_iter_no_change=10, solver="adam",
                 prior_precision=1.0, prior_structure="scalar",
                 hyperparameter_tuning="auto", validation_fraction=0.2, model_averaging=False,
                 subset_of_weights="auto",
                 hessian_structure="auto", subnetwork=None, lowrank_rank=None, curvature="ggn",
                 pred_type="glm", gp_subset_size=None, n_samples=100,
                 extrapolation_variance="auto", temperature=1.0, refine=None,
                 sigma_noise=1.0, noise="homoscedastic",
                 normalize_y=True, online_frequency=5, online_burn_in=0, online_steps=None,
                 online_lr=0.1, online_curvature="every", device="cpu", memory=None,
                 random_state=None, verbose=0):
        self.net = net
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_epochs = max_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.solver = solver
        self.prior_precision = prior_precision
        self.prior_structure = prior_structure
        self.hyperparameter_tuning = hyperparameter_tuning
        self.validation_fraction = validation_fraction
        self.model_averaging = model_averaging
        self.subset_of_weights = subset_of_weights
        self.hessian_structure = hessian_structure
        self.subnetwork = subnetwork
        self.lowrank_rank = lowrank_rank
        self.curvature = curvature
        self.pred_type = pred_type
        self.gp_subset_size = gp_subset_size
        self.refine = refine
        self.n_samples = n_samples
        self.extrapolation_variance = extrapolation_variance
        self.temperature = temperature
        self.sigma_noise = sigma_noise
        self.noise = noise
        self.normalize_y = normalize_y
        self.online_frequency = online_frequency
        self.online_burn_in = online_burn_in
        self.online_steps = online_steps
        self.online_lr = online_lr
        self.online_curvature = online_curvature
        self.device = device
        self.memory = memory
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    @keeps_state_on_failure
    @thread_policy
    @torch_entry_point
    def fit(self, X, y, sample_weight=None):
        """Train the network to the MAP, fit the Laplace approximation and tune it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Target values.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights w_i multiplying each row's log-likelihood
            everywhere: the MAP objective (Σ w_i·nll_i / T + δ/2·‖θ‖², i.e. N
            replaced by Σ w_i), the curvature (each row's GGN or empirical-Fisher
            term times w_i, all structures), the evidence (weighted squared
            errors, Σ w_i rows in the Gaussian normalizer), ``normalize_y``
            (weighted mean and std) and the held-out NLL of ``"cv"`` (the
            weights are split with the rows; ``"online"`` uses them too).
            Integer weights equal duplicating the rows, to rounding, where training
            is deterministic and full batch and no rows are drawn
            (``solver="lbfgs"``, ``"evidence"`` or no tuning, a tuple of
            ``hidden_layer_sizes``, no ``gp_subset_size``); elsewhere only
            approximately: minibatches and held-out rows are drawn by rows, and
            online updates let the two fits' rounding differences grow. ``None``:
            all rows weigh 1 (the unweighted fit).
            Rows of weight 0 are dropped first.

        Returns
        -------
        self : LaplaceRegressor
            The fitted estimator.

        Raises
        ------
        ValueError
            If the parameters are invalid, ``sigma_noise`` does not match the
            outputs of y or is too small for its spread, or the network does not
            match the targets.
        """
        return self._fit_any(X, y, sample_weight)

"""LaplaceClassifier: a neural network classifier with a Laplace posterior."""

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.frozen import FrozenEstimator
from sklearn.utils.multiclass import is_multilabel

from .._laplace import policy
from ._base import BaseLaplace, keeps_state_on_failure
from ._classifier_predictive import ClassifierPredictive
from ._continual import ClassifierPartialFit
from ._labels import encoded_targets
from .._laplace.workflow import torch_entry_point
from .._multilabel import accepts_indicator, multilabel_likelihood, multilabel_targets
from ._threads import thread_policy
from ._validation import CLASSIFIER_CONSTRAINTS


class LaplaceClassifier(ClassifierMixin, ClassifierPredictive, ClassifierPartialFit,
                        BaseLaplace):
    """Neural network classifier with a Laplace approximation posterior.

    Trains a skorch net to the MAP (the prior as weight decay), fits a Gaussian
    posterior around it from the curvature and predicts with the linearized
    (GLM) predictive. Binary problems with the default MLP use one logit
    (Bernoulli likelihood), multi-class problems one logit per class, and a
    multilabel ``y`` (an indicator matrix, as ``MLPClassifier`` takes) one
    sigmoid per label: ``predict_proba`` (n, L) is then per label. There,
    ``hidden_layer_sizes="auto"`` trains a candidate that does not improve while
    its held-out δ is at or below ``prior_precision`` (its net overfits) once more
    under 10 × ``prior_precision`` (a row of ``model_selection_results_`` that
    repeats the sizes).

    Parameters
    ----------
    net : skorch NeuralNet, FrozenEstimator or None, default=None
        The network. ``None`` builds a tanh MLP sized from the data
        (``hidden_layer_sizes``, trained with Adam). A skorch net (criterion
        ``CrossEntropyLoss`` or ``BCEWithLogitsLoss``) is copied and trained to
        the MAP inside ``fit`` (``self.net`` is never mutated); criterion settings
        that change the likelihood (``criterion__weight``, ``label_smoothing``)
        are refused: use ``class_weight`` or ``sample_weight``.
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
    batch_size : int or "auto", default=128
        Mini-batch size of the default MLP. ``"auto"`` (``LaplaceRegressor``'s
        default): 128 rows, or ⌈N/16⌉ for N above 2,048 training rows.
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
        How δ is chosen; the result is in ``hyperparameter_tuning_``.
        ``"auto"``: ``"cv"`` (``"evidence"`` with a non-scalar
        ``prior_structure``, a ``FrozenEstimator`` net, ``refine``, or when
        fewer than 10 rows would be held out; the choice and its scoreboard are
        in the README).
        ``"evidence"``: maximise the Laplace log evidence after training,
        bounded to log10 δ ∈ [−4, 4] (warns at a bound). ``"online"``: Immer et
        al. (2021) Alg. 1 during training (all weights). ``None``: keep the
        given values (use this in GridSearchCV over ``prior_precision``).
        ``"cv"``: fit the network and the LA on ``1 − validation_fraction`` of
        the rows, choose the scalar δ by the NLL of the predictive (the
        GP's with ``pred_type="gp"``; the sampled net's, over whole decades,
        with ``"nn"``) on the held-out rest (Laplace Redux's
        "CV" method; log10 δ ∈ [−4, 4] in quarter decades; the smallest δ —
        the broadest posterior — within one paired standard error and 0.002
        nats of the smallest NLL, warning at a grid bound), then continue
        training the net on all rows from where it stopped (a warm start, with
        the given ``prior_precision`` as weight decay, as without tuning) and
        fit the LA there with the chosen δ (as scikit-learn's ``*CV``
        estimators with ``refit=True``).
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
    link_approx : {"probit", "bridge", "mc"}, default="probit"
        Approximation of the expected softmax (sigmoid) under the Gaussian over
        logits: (extended) probit, Laplace-bridge Dirichlet mean, or Monte Carlo.
        The probit ignores the correlations of the logits; where they are large
        (broad posteriors over many classes) ``"mc"`` with enough samples can
        differ by several hundredths of a nat. For two classes the probit is the
        binary one of f1 − f0; the bridge's mean is the MAP probability (its two
        logits have one variance, which cancels): its uncertainty is only in
        ``predict_dist``. Multilabel: per label (``"bridge"`` refused).
    n_samples : int, default=100
        Samples of the ``"mc"`` link and of ``pred_type="nn"``.
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
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes as in ``LogisticRegression``: each row's weight
        (multiplied into ``sample_weight``) is ``class_weight[y_i]``;
        ``"balanced"`` uses ``n_samples / (n_classes * np.bincount(y))``.
        Refused for a multilabel ``y`` (use ``sample_weight``).
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
    classes_ : ndarray of shape (n_classes,)
        The class labels seen in ``fit`` (or given to ``partial_fit``);
        multilabel: ``arange(n_labels)``, as ``MLPClassifier``'s.
    prior_precision_ : float or ndarray
        Prior precision after tuning, in the form of ``prior_precision``.
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
        Laplace log marginal likelihood of the fit.
    evidence_history_ : list of dict
        Online tuning only: epoch, log_evidence, prior_precision (one value
        per parameter tensor; per weight with ``prior_structure="diag"``) per
        update.
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
    estimators_ : list of LaplaceClassifier
        ``model_averaging=True`` only: the candidates of non-zero weight, refit.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of str
        Names of the features seen during ``fit``; only with pandas input.

    See Also
    --------
    LaplaceRegressor : The regression counterpart.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklaplace import LaplaceClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(), LaplaceClassifier(max_epochs=20, random_state=0))
    >>> clf.fit(X, y).predict_proba(X[:2]).shape
    (2, 2)
    """

    _likelihood_kinds = ("categorical", "bernoulli", "multilabel")
    _parameter_constraints = CLASSIFIER_CONSTRAINTS

    def __init__(self, net=None, *, hidden_layer_sizes="auto", max_epochs=200, lr=1e-2,
                 batch_size=128, tol=1e-4, n_iter_no_change=10, solver="adam",
                 prior_precision=1.0, prior_structure="scalar", hyperparameter_tuning="auto",
                 validation_fraction=0.2, model_averaging=False, subset_of_weights="auto",
                 hessian_structure="auto", subnetwork=None, lowrank_rank=None, curvature="ggn",
                 pred_type="glm", gp_subset_size=None, link_approx="probit", n_samples=100,
                 extrapolation_variance="auto", temperature=1.0, refine=None, class_weight=None,
                 online_frequency=5, online_burn_in=0, online_steps=None, online_lr=0.1,
                 online_curvature="every", device="cpu", memory=None, random_state=None,
                 verbose=0):
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
        self.link_approx = link_approx
        self.n_samples = n_samples
        self.extrapolation_variance = extrapolation_variance
        self.temperature = temperature
        self.class_weight = class_weight
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
        y : array-like of shape (n_samples,) or (n_samples, n_labels)
            Class labels of any type, or a multilabel indicator matrix of 0/1.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights w_i multiplying each row's log-likelihood
            everywhere: the MAP objective (Σ w_i·nll_i / T + δ/2·‖θ‖², i.e. N
            replaced by Σ w_i), the curvature (each row's GGN or empirical-Fisher
            term times w_i, all structures), the evidence and the held-out NLL of
            ``"cv"`` (the weights are split with the rows). Integer weights equal
            duplicated rows where nothing draws rows (``solver="lbfgs"``,
            ``"evidence"`` or no tuning, a tuple of ``hidden_layer_sizes``, no
            ``gp_subset_size``), else approximately (minibatches and held-out rows
            are drawn by rows). ``None``: all rows weigh 1. Rows of weight 0 are
            dropped first.

        Returns
        -------
        self : LaplaceClassifier
            The fitted estimator.

        Raises
        ------
        ValueError
            If the parameters are invalid, ``y`` has fewer than two classes, or
            the network does not match the classes.
        """
        return self._fit_any(X, y, sample_weight)

    def _fit_rows(self, X, y, sample_weight=None, task=None):
        """``fit``'s body; ``task``: the first ``partial_fit`` call's (its classes)."""
        if task is None and is_multilabel(y):  # one Bernoulli logit per label
            X, y, sample_weight = multilabel_targets(self, X, y, sample_weight)
            self.classes_ = np.arange(y.shape[1])  # as MLPClassifier's for an indicator y
            return self._fit(X, y, "multilabel", y.shape[1], sample_weight=sample_weight)
        X, y_index, sample_weight, classes, default, n_outputs = encoded_targets(
            self, X, y, sample_weight, task)
        self.classes_ = classes
        return self._fit(X, y_index, default, n_outputs, sample_weight=sample_weight, task=task)

    def _default_tuning(self, n_rows):
        return policy.classifier_tuning(n_rows, self.validation_fraction, self.prior_structure,
                                        isinstance(self.net, FrozenEstimator), self.refine)

    def _likelihood(self, name, default):
        return (multilabel_likelihood(name) if default == "multilabel"
                else super()._likelihood(name, default))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = accepts_indicator(self)  # what this instance fits
        return tags

    def _check_outputs(self, likelihood, n_outputs, n_out):
        if likelihood.single_logit and len(self.classes_) != 2:
            raise ValueError(
                f"The net's criterion BCEWithLogitsLoss (one logit, Bernoulli) models two "
                f"classes but y has {len(self.classes_)}; use CrossEntropyLoss with one output "
                "per class.")
        expected = likelihood.n_outputs(len(self.classes_))
        if n_out != expected:
            raise ValueError(
                f"The network outputs {n_out} values per row but the {likelihood.name} "
                f"likelihood with {len(self.classes_)} "
                f"{'labels' if likelihood.multilabel else 'classes'} needs {expected}.")

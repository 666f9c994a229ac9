"""
Continual learning on permuted digits
=====================================

Continual learning on permuted digits: one task's Laplace posterior is the next one's prior.

Run it as ``python examples/plot_continual_digits.py [--tasks 5]``.

Permuted-MNIST in small (Laplace Redux §4.4, App. C.4): every task is the bundled
8×8 digits with its own fixed random permutation of the 64 pixels.  One network
learns the tasks one after another and never sees an earlier task's data again;
after each task it is tested on every task seen so far.

- fine-tuning: the same MLP, trained on each task in turn from where the previous
  task left it (skorch ``partial_fit``): nothing keeps it near the old solutions.
- LA (kron / diag): ``LaplaceClassifier.partial_fit`` — the net is trained from the
  previous MAP under the previous Laplace posterior as its prior (all weights,
  Kronecker-factored or diagonal GGN, summed over tasks), δ re-tuned per task by the
  evidence of the new task given the old ones.

The table reports the accuracy of the MAP network of each learner after each task
(what the prior acts on); after the last task the Laplace predictive's accuracy
(``predict``, the probit predictive of the posterior) is reported per task as well.
"""

import argparse
import time

import numpy as np
import torch
from skorch import NeuralNetClassifier
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from sklaplace import LaplaceClassifier
from sklaplace.nets import MLP

HIDDEN = (100,)
EPOCHS = 30
LR = 1e-2
BATCH = 64
PRIOR = 0.1  # δ of the first task (then re-tuned by the evidence)
# A net this small gains nothing from a second thread, and threads that wait for busy cores
# slow every operation; sklaplace chooses its threads per call, the plain skorch net does not.
torch.set_num_threads(1)


def permuted_tasks(n_tasks, seed=0):
    """(X_train, y_train, X_test, y_test) per task: one pixel permutation each."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=seed,
                                                        stratify=y)
    rng = np.random.RandomState(seed)
    tasks = []
    for _ in range(n_tasks):
        perm = rng.permutation(X.shape[1])
        tasks.append((X_train[:, perm], y_train, X_test[:, perm], y_test))
    return tasks


def fine_tuning_net(seed=0):
    torch.manual_seed(seed)
    net = NeuralNetClassifier(MLP, module__n_features=64, module__n_outputs=10,
                              module__hidden_layer_sizes=HIDDEN, criterion=nn.CrossEntropyLoss,
                              optimizer=torch.optim.Adam, lr=LR, batch_size=BATCH,
                              max_epochs=EPOCHS, train_split=None, verbose=0)
    return net.initialize()


def map_accuracy(learner, X, y):
    """Test accuracy of the MAP network (the argmax of its logits)."""
    net = getattr(learner, "net_", learner)  # the LaplaceClassifier's trained skorch net
    logits = net.forward(X.astype(np.float32))
    return float(np.mean(logits.argmax(1).numpy() == y))


def main(n_tasks=5):
    tasks = permuted_tasks(n_tasks)
    classes = np.arange(10)
    learners = {
        "fine-tuning": fine_tuning_net(),
        "LA kron": LaplaceClassifier(hidden_layer_sizes=HIDDEN, max_epochs=EPOCHS, lr=LR,
                                     batch_size=BATCH, hessian_structure="kron",
                                     prior_precision=PRIOR, random_state=0),
        "LA diag": LaplaceClassifier(hidden_layer_sizes=HIDDEN, max_epochs=EPOCHS, lr=LR,
                                     batch_size=BATCH, hessian_structure="diag",
                                     prior_precision=PRIOR, random_state=0),
    }
    seconds = dict.fromkeys(learners, 0.0)
    print(f"{n_tasks} permuted-digits tasks, {len(tasks[0][0])} train / {len(tasks[0][2])} test "
          f"rows each; MLP 64-{'-'.join(map(str, HIDDEN))}-10, {EPOCHS} epochs per task")
    print("mean test accuracy over the tasks seen so far (and on task 1)")
    print("task  " + "  ".join(f"{name:>18}" for name in learners))
    final, history = {}, {name: [] for name in learners}
    for t, (X_t, y_t, _, _) in enumerate(tasks):
        row = []
        for name, learner in learners.items():
            start = time.perf_counter()
            if name == "fine-tuning":
                learner.partial_fit(X_t.astype(np.float32), y_t.astype(np.int64))
            else:
                learner.partial_fit(X_t, y_t, classes=classes)
            seconds[name] += time.perf_counter() - start
            accs = [map_accuracy(learner, X_s, y_s) for _, _, X_s, y_s in tasks[:t + 1]]
            final[name] = accs
            history[name].append(np.mean(accs))
            row.append(f"{np.mean(accs):>11.3f} ({accs[0]:.3f})")
        print(f"{t + 1:>4}  " + "  ".join(row))
    print("after the last task, accuracy per task:")
    for name, accs in final.items():
        print(f"  {name:<12} " + " ".join(f"{a:.3f}" for a in accs))
        if name != "fine-tuning":
            la = [np.mean(learners[name].predict(X_s) == y_s) for _, _, X_s, y_s in tasks]
            print(f"  {name + ' pred':<12} " + " ".join(f"{a:.3f}" for a in la)
                  + f"   (Laplace predictive; mean {np.mean(la):.3f})")
    for name, learner in learners.items():
        extra = ""
        if name != "fine-tuning":
            extra = (f"; δ = {learner.prior_precision_:.3g}, posterior over "
                     f"{learner.n_params_} weights ({learner.hessian_structure_})")
        print(f"  {name:<12} {seconds[name]:.1f} s{extra}")
    return history


def plot(history):
    """Mean test accuracy over the tasks seen so far, after each task."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, accs in history.items():
        ax.plot(range(1, len(accs) + 1), accs, marker="o", label=name)
    ax.set_xlabel("tasks learnt")
    ax.set_ylabel("mean test accuracy over those tasks")
    ax.set_xticks(range(1, len(accs) + 1))
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("Permuted digits: the MAP network of each learner")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Continual learning on permuted digits")
    parser.add_argument("--tasks", type=int, default=5)
    plot(main(parser.parse_args().tasks))

    import matplotlib.pyplot as plt

    plt.show()

"""The exploitation arm's model: one CART tree over all websites and network classes (Configanator §3.1, §5).

Configanator §5: scikit-learn CART, entropy, "set the minimum number of leaf nodes to 80",
min_samples_split=2, unlimited depth. scikit-learn has no minimum on the *number* of leaves, so the sentence
has two readings: ``min_samples_leaf=80`` (the minimum number of samples at a leaf node, the parameter whose
name has "min" and "leaf"; ``leaf_mode='min'``, the default) and ``max_leaf_nodes=80`` (a count of leaves, as
footnote 5's sweep "number of leaf nodes ranging from 50 to 500" suggests; ``leaf_mode='max'``). The default
was chosen on held-out worlds (seeds 5-9 of the default scenario, never used for the reported figures):
'min' gave a higher median and p95 improvement in all five (docs/configanator.md, "Tree reading").

Training rows are observed connections (features: website, device, network / AS characteristics),
labelled with the best configuration found so far for their website x class pair; a leaf therefore
holds the majority best configuration of similar connections, which is how the tree generalises to
classes (and pairs) it has no label for. Prediction walks the fitted arrays directly (a few
microseconds, vs ~60 us for ``predict`` on one row), since it runs per connection.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from tailor.errors import check


class ConfigTree:
    """Features -> configuration index, refitted at plan()."""

    def __init__(self, leaves: int = 80, leaf_mode: str = "min", seed: int = 0):
        check(leaves >= 2, "ConfigTree", "leaves", "an integer >= 2", leaves)
        check(leaf_mode in ("max", "min"), "ConfigTree", "leaf_mode", "'max' or 'min'", leaf_mode)
        self.leaves, self.leaf_mode, self.seed = leaves, leaf_mode, seed
        self._tree = None  # (left, right, feature, threshold, leaf label) arrays
        self.n_fits = 0
        self.n_leaves = 0

    def _model(self) -> DecisionTreeClassifier:
        bound = {"max_leaf_nodes": self.leaves} if self.leaf_mode == "max" else {"min_samples_leaf": self.leaves}
        return DecisionTreeClassifier(criterion="entropy", min_samples_split=2, max_depth=None,
                                      random_state=self.seed, **bound)

    def fit(self, X: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None) -> ConfigTree:
        """Fit on (features, configuration index); a single-label set gives a constant tree."""
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=int)
        check(len(X) == len(y) and len(y) > 0, "ConfigTree", "X, y", "non-empty and of equal length", len(y))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = self._model().fit(X, y, sample_weight=weight)
        t = model.tree_
        labels = model.classes_[np.argmax(t.value[:, 0, :], axis=1)].astype(int)
        self._tree = (t.children_left.tolist(), t.children_right.tolist(), t.feature.tolist(),
                      t.threshold.tolist(), labels.tolist())
        self.n_fits += 1
        self.n_leaves = int(model.get_n_leaves())
        return self

    def predict(self, x: np.ndarray) -> int | None:
        """Configuration index for one feature row, or None before the first fit."""
        if self._tree is None:
            return None
        left, right, feature, threshold, labels = self._tree
        node = 0
        while left[node] >= 0:
            f = feature[node]
            node = left[node] if (x[f] if f < len(x) else 0.0) <= threshold[node] else right[node]
        return labels[node]

    @property
    def fitted(self) -> bool:
        return self._tree is not None

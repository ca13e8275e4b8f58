"""The job's --optimizer as a torch.optim optimizer, for AllReduce workers
(each member steps its own copy; with parameter servers the PS apply it).

The spec is the master's, already checked there: "kind[:arg=value,...]",
kinds sgd, momentum, adam, adagrad with Keras's argument names and defaults
(internal/ps/optimizer/parse.go). decay (Keras's legacy inverse-time decay,
lr / (1 + decay * t) at update t) is returned for the caller to apply.
"""

import torch

from ._rpc import ElasticDLError

_DEFAULTS = {
    "sgd": {"learning_rate": "0.01", "momentum": "0", "nesterov": "false", "decay": "0"},
    "momentum": {"learning_rate": "0.01", "momentum": "0.9", "nesterov": "false", "decay": "0"},
    "adam": {"learning_rate": "0.001", "beta1": "0.9", "beta2": "0.999", "epsilon": "1e-7", "amsgrad": "false", "decay": "0"},
    "adagrad": {"learning_rate": "0.001", "initial_accumulator_value": "0.1", "epsilon": "1e-7", "decay": "0"},
}
_ALIAS = {"lr": "learning_rate", "beta_1": "beta1", "beta_2": "beta2"}


def parse(spec):
    """(kind, {arg: str}) of spec with the defaults filled in."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in _DEFAULTS:
        raise ElasticDLError("--optimizer %r: unknown optimizer %r (known: %s)" % (spec, kind, ", ".join(sorted(_DEFAULTS))))
    args = dict(_DEFAULTS[kind])
    for item in rest.split(","):
        if not item.strip():
            continue
        k, sep, v = item.partition("=")
        k = _ALIAS.get(k.strip(), k.strip())
        if not sep or k not in args:
            raise ElasticDLError("--optimizer %r: unknown argument %r of %s" % (spec, item.strip(), kind))
        args[k] = v.strip()
    return kind, args


def build(spec, params):
    """A torch optimizer over params for spec, and its decay."""
    kind, a = parse(spec)
    f = lambda k: float(a[k])
    b = lambda k: a[k].lower() in ("true", "1")
    lr = f("learning_rate")
    if kind in ("sgd", "momentum"):
        opt = torch.optim.SGD(params, lr=lr, momentum=f("momentum"), nesterov=b("nesterov"))
    elif kind == "adam":
        opt = torch.optim.Adam(params, lr=lr, betas=(f("beta1"), f("beta2")), eps=f("epsilon"), amsgrad=b("amsgrad"))
    else:
        opt = torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=f("initial_accumulator_value"), eps=f("epsilon"))
    return opt, f("decay")

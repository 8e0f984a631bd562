r"""The ``"eigen-adam"`` step rule of :class:`~.natural_gradient.NaturalGradient` (the default with K-FAC).

Adam in the Kronecker eigenbasis of the Fisher's K-FAC factors.  For a layer with factors
:math:`A = U_A\Lambda_AU_A^T`, :math:`G = U_G\Lambda_GU_G^T` and (bias-augmented) gradient :math:`\bar W`, with
:math:`\tilde g = U_G^T\bar WU_A` the gradient in the eigenbasis :math:`U_G\otimes U_A`::

.. math:: m \leftarrow \beta_1 m + (1-\beta_1)\tilde g,\quad
          v \leftarrow \beta_2 v + (1-\beta_2)\tilde g^{\odot 2},\quad
          \bar W \leftarrow \bar W - \eta\,U_G\big[\hat m \oslash (\sqrt{\hat v} + \epsilon)\big]U_A^T.

:math:`v` is a running estimate, renewed every step, of the curvature's eigenvalues in that basis: EKFAC's
eigenvalue correction (George et al. 2018, "Fast approximate natural gradient descent in a Kronecker-factored
eigenbasis") kept as Adam keeps its second moment, and its square root taken as Adam takes it.  SOAP
(Vyas et al. 2025, "SOAP: Improving and stabilizing Shampoo using Adam") runs the same update in the
eigenbasis of the gradients' own outer products; here the basis is the model Fisher's, refreshed on the
curvature's schedule, and the moments are carried over to each new basis (:func:`change_basis`).
In the null space of a factor (directions no statistic has reached, which have no preferred basis) the
second moment is one per row or column (:func:`pool_null`), so the step does not depend on the basis an
eigensolver picks there.
A diagonal factor (an Embedding's token side, a vocabulary-sized side) has the identity as its
eigenbasis, so that side is not rotated; a weight matrix without Kronecker factors steps in the eigenbasis
of its own gradient's statistics (SOAP's; :mod:`.gradient_basis`), and vectors (norms, biases of other
layers) take Adam's step on their raw coordinates.  With :math:`U_A, U_G` the identity the rule is Adam;
:math:`\eta` means what it means for Adam.  The layers that read the data and the one that writes the output may
step at a multiple of it (``lr_scales``: :class:`~.natural_gradient.NaturalGradient`'s ``input_lr_scale`` and
``output_lr_scale``).

With ``nesterov=True`` (the default under the model's Fisher) the first moment looks one step ahead, as NAdam's
does (Dozat 2016, "Incorporating Nesterov momentum into Adam"; ``torch.optim.NAdam`` with a constant :math:`\beta_1`):
:math:`\hat m = \beta_1 m/(1-\beta_1^{t+1}) + (1-\beta_1)\tilde g/(1-\beta_1^t)` in place of
:math:`m/(1-\beta_1^t)`.  The current gradient's larger share damps the overshoot of the averaged one: in the
race (``benchmarks/optimizer_race.py``) it kept twice the learning rate stable on the digits classifier and CNN
and took the masked-character model to its target in 130-150 steps instead of 160-180.  Such a step depends
on the gradient as well as on the state, so it is kept (one weight's worth, half that held in bfloat16) to be
undone, not recomputed.

With ``cautious=True`` (the default under the model's Fisher) each coordinate of
:math:`\hat m/(\sqrt{\hat v}+\epsilon)` whose sign disagrees with :math:`\tilde g`'s is set to zero and the
others scaled by the inverse of their share (per block; :func:`~.step.cautious_mask`, Liang et al. 2024,
"Cautious optimizers: improving training with one line of code").  In the eigenbasis the coordinates are the
curvature's directions, so a direction along which the momentum would carry the step uphill on this batch waits
for the gradient to agree.  In the race it took fewer steps to the target on four of the five workloads (as many
on the fifth) and took the digits classifier and CNN to it at ``lr=3e-2`` on more seeds, where Adam's momentum
alone oscillated (docs/nn.md; some seeds still do).  It too makes the step depend on the gradient, which is then
kept to be undone.

The state (moments, kept step, and the eigenbases a block holds) may be held narrower than it is computed in
(``state_dtype``; :func:`~infogeo.nn._params.held_dtype`): each step computes from the held values in the working
dtype and rounds what it keeps, so a step recomputed from the state has the same bits.  A basis held in bfloat16
rotates in bfloat16 where the device multiplies it natively and the product is large
(:func:`~infogeo.nn._params.held_product`): those rotations are most of a step's own cost on small models.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Collection, Dict, List, Optional, Tuple, Union, cast

import torch

from .._params import held_dtype, held_product, working, working_dtype
from ..curvature.eigenbasis import EigenbasisKronBlock
from .gradient_basis import gradient_basis, matrix_view
from .step import LastSteps, adam_directions, adam_moments, cautious_mask, started_afresh

__all__ = ["eigen_steps", "eigen_adam", "eigen_adam_again", "pool_null", "change_basis", "rotated_gradient"]

#: a Kronecker eigenbasis ``(U_A, U_G)``: the eigenvectors of a block's input and output-gradient factors
Basis = Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]


def eigen_adam_again(state: Dict[str, torch.Tensor], split: Any, name: str, dtype: torch.dtype, lr: float,
                     betas: Tuple[float, float], eps: float, work: Optional[torch.dtype] = None) -> torch.Tensor:
    r"""The step :func:`eigen_adam` took last, from its state alone, scaled by :math:`-\eta` in ``dtype``:
    :math:`U_G\,[\hat m/(\sqrt{\hat v}+\epsilon)]\,U_A^T` with the basis it kept (``split``: a block's
    :meth:`~infogeo.nn.curvature.kron.KronBlock.split`, whose ``name`` entry is taken; ``None``: a parameter
    without Kronecker factors); ``work``: the dtype the step was computed in, where the state is held narrower."""
    u = _eigen_direction(state, betas, eps, work=work)
    u = u if split is None else split(u)[name]
    return u.to(dtype).mul_(-lr)


def eigen_steps(pre: Any, states: Any, raw: Dict[str, torch.Tensor], last: LastSteps,
                betas: Union[Tuple[float, float], Dict[int, Tuple[float, float]]],
                eps: float, unfactored: str, nesterov: bool = False,
                held: Union[None, str, torch.dtype] = None, idle: Collection[str] = (),
                cautious: bool = False, lr_scales: Optional[Dict[str, float]] = None) -> Dict[str, torch.Tensor]:
    r"""The ``"eigen-adam"`` steps :math:`-\eta\,u` of every parameter of the preconditioner ``pre``, from the gradients
    ``raw``: each Kronecker block's in its eigenbasis (rotated from the batch's rows where they give the
    gradient at less cost), each other matrix's in its gradient's eigenbasis (``unfactored="soap"``,
    :mod:`.gradient_basis`) or, like vectors, on its raw coordinates.  ``states``: the optimizer's per-parameter
    state; ``last`` records how to recompute each step (to undo it; a Nesterov step, ``nesterov=True``, which
    depends on the gradient as well as on the state, is kept instead).  ``held``: the dtype the moments and the
    kept steps are held in where narrower than the one they are computed in (:func:`~infogeo.nn._params.held_dtype`).
    ``betas``: Adam's decay rates, or those of each parameter (by ``id``: its group's, which a scheduler may
    cycle); a block takes its first parameter's.  ``idle``: the parameters without a gradient this step (``.grad``
    ``None``: an unused branch), left out with their state, as ``torch.optim.Adam`` leaves them (a block all of whose
    parameters are idle; no step is returned for them).  ``cautious``: each direction masked where it disagrees in
    sign with the rotated gradient (:func:`~.step.cautious_mask`, per block or parameter; such a step, too, is kept).
    ``lr_scales``: a multiple of its rate for a parameter, by name (the layers that read the data, the one that
    writes the output; 1 for the others).

    The rotations are per block; Adam's elementwise updates of all blocks are fused (:func:`adam_moments`,
    :func:`adam_directions`: a handful of operations per step instead of a dozen per parameter, which is
    what a step of a small model costs on a GPU)."""
    lrs, scales = pre.learning_rates(), lr_scales or {}
    params = dict(zip(pre.names, pre.params))
    rows = pre.take_rows()
    # per block or parameter: (its parameters, Adam state, gradient in the basis, the split of a direction
    # into its parameters: None for a parameter on its raw coordinates)
    jobs: List[Tuple[Any, ...]] = []
    null: Dict[int, Tuple[int, int]] = {}   # job -> the null-space dimensions of its block's factors
    for b in (b for b in getattr(pre.solver, "blocks", ()) if isinstance(b, EigenbasisKronBlock)):
        if all(n in idle for n in b.names):
            continue
        r = rows.get(b.weight or "")
        _into_block(b, [states[params[n]] for n in b.names], [params[n] for n in b.names])
        state = states[params[b.names[0]]]
        g = rotated_gradient(state, None if r else b.join(raw), b.basis(),
                             rotated=b.rotate_rows(*r) if r else None, work=b.working_dtype, held=held)
        jobs.append((b.names, state, g, b.layout_only().split))
        null[len(jobs) - 1] = b.null_dims()
    factored = {n for j in jobs for n in j[0]}
    for n, p in params.items():
        if n in factored or n in idle:
            continue
        if "exp_avg" in states[p] and not {"L", "R"} & set(states[p]) and {"U_A", "U_G"} & set(states[p]):
            started_afresh(states[p])   # a Kronecker block's moments, whose block is gone
        G = matrix_view(raw[n]) if unfactored == "soap" else None
        if G is not None:
            split = partial(_as_param, n, p.shape)
            basis = gradient_basis(states[p], G)
            jobs.append(([n], states[p], rotated_gradient(states[p], G, basis, held=held), split))
        else:
            _as_raw(states[p], p.shape)
            jobs.append(([n], states[p], rotated_gradient(states[p], raw[n], None, held=held), None))
    # the moments updated in the gradients' dtype, then held (rounded) in theirs: the step is computed from the
    # held values, as eigen_adam_again computes it again
    work = [_working(j[1], j[2].dtype) for j in jobs]
    rates = [cast(Tuple[float, float], tuple(betas if isinstance(betas, tuple) else betas[id(params[j[0][0]])]))
             for j in jobs]
    together = {r: [i for i, q in enumerate(rates) if q == r] for r in dict.fromkeys(rates)}   # fused per rates
    for r, idx in together.items():
        adam_moments([work[i] for i in idx], [jobs[i][2] for i in idx], r)
    for i, dims in null.items():
        pool_null(work[i], dims)
    for (_, state, _, _), w in zip(jobs, work):
        _hold_back(state, w)
    steps = {}
    directions: List[Any] = [None] * len(jobs)
    for r, idx in together.items():
        found = adam_directions([work[i] for i in idx], r, eps, grads=[jobs[i][2] for i in idx] if nesterov else None)
        if cautious:   # in the coordinates the moments are kept in, against this step's gradient there
            found = cautious_mask(found, [jobs[i][2] for i in idx],
                                  {j: null[i] for j, i in enumerate(idx) if i in null})
        for i, u in zip(idx, found):
            directions[i] = u
    kept = nesterov or cautious   # a step that depends on the gradient is kept to be undone, not recomputed
    for (names, state, g, split), u, r in zip(jobs, directions, rates):
        u = _out_of_basis(u, state)
        parts = {names[0]: u} if split is None else split(u)
        for n in names:
            p = params[n]
            lr = lrs[id(p)] * scales.get(n, 1.0)
            steps[n] = parts[n].to(p.dtype).mul_(-lr)
            last.record(n, partial(_kept, _narrowed(steps[n], held)) if kept else
                        partial(eigen_adam_again, state, split, n, p.dtype, lr, betas=r, eps=eps, work=g.dtype))
    return steps


def _narrowed(t: torch.Tensor, held: Union[None, str, torch.dtype]) -> torch.Tensor:
    dt = held_dtype(held, t.dtype)
    return t if dt is None else t.to(dt)


def _working(state: Dict[str, torch.Tensor], dtype: torch.dtype) -> Dict[str, torch.Tensor]:
    """The moments of ``state`` in ``dtype`` (copies where they are held in another; the step count shared)."""
    if state["exp_avg"].dtype == dtype:
        return state
    return {"exp_avg": state["exp_avg"].to(dtype), "exp_avg_sq": state["exp_avg_sq"].to(dtype), "step": state["step"]}


def _hold_back(state: Dict[str, torch.Tensor], work: Dict[str, torch.Tensor]) -> None:
    """Moments updated in ``work`` (a :func:`_working` copy) put back into ``state``, and ``work`` given the values
    held (rounded to their dtype), so that what follows computes from what is kept."""
    if work is state:
        return
    for key in ("exp_avg", "exp_avg_sq"):
        state[key].copy_(work[key])
        work[key].copy_(state[key])


def _kept(step: torch.Tensor) -> torch.Tensor:
    return step


def _into_block(block: EigenbasisKronBlock, parts: List[Dict[str, torch.Tensor]], params: List[torch.Tensor]) -> None:
    r"""Moments kept per parameter (``parts``: the states of the block's parameters, in its order) carried into the
    block's joined layout :math:`[W\ b]`, where the block is new to them: a layer that had no Kronecker factors at
    an earlier step (unused until now, or another structure).  Each parameter's moments go to its raw coordinates
    (:func:`_as_raw`), are joined like its gradient, and are kept in the identity basis, from which the next
    :func:`change_basis` turns them into the block's eigenbasis; a parameter without moments contributes zeros."""
    first, rest = parts[0], parts[1:]
    sides = {"U_A": block.shapes["A"], "U_G": block.shapes["G"]}   # (n,): a diagonal factor
    shape = (sides["U_G"][0], sides["U_A"][0])
    stale = any("exp_avg" in s for s in rest) or ("exp_avg" in first and (
        tuple(first["exp_avg"].shape) != shape or "L" in first or "R" in first
        or any(len(f) == 2 and k not in first for k, f in sides.items())))
    if not stale:
        return
    moments: Dict[str, Dict[str, torch.Tensor]] = {"exp_avg": {}, "exp_avg_sq": {}}
    count = None
    for name, s, p in zip(block.names, parts, params):
        if "exp_avg" in s:
            _as_raw(s, p.shape)
            if s["exp_avg"].shape == p.shape:   # else a joined layout of another block: not separable, dropped
                for key in moments:
                    moments[key][name] = s[key]
                count = s["step"] if count is None else torch.maximum(count, s["step"])
        started_afresh(s)
    if count is None:
        return
    like = next(iter(moments["exp_avg"].values()))
    for key, given in moments.items():
        first[key] = block.join({n: given.get(n, like.new_zeros(p.shape)) for n, p in zip(block.names, params)})
    first["step"] = count
    for key, side in sides.items():
        if len(side) == 2:   # the identity basis: raw coordinates (a diagonal factor's side has no matrix)
            first[key] = torch.eye(side[0], dtype=like.dtype, device=like.device)


def _as_raw(state: Dict[str, torch.Tensor], shape: torch.Size) -> None:
    """Moments kept in a gradient eigenbasis (``unfactored="soap"``, or its checkpoint) carried back to the
    parameter's raw coordinates (the identity basis), the statistics dropped."""
    if "L" in state or "R" in state:
        m = state["exp_avg"]
        work = working_dtype(m.dtype)
        eye = [None if U is None else torch.eye(len(U), dtype=work, device=m.device)
               for U in (state.get("U_A"), state.get("U_G"))]
        change_basis(state, (eye[0], eye[1]), work)
        for key in ("L", "R", "U_A", "U_G"):
            state.pop(key, None)
        state["exp_avg"], state["exp_avg_sq"] = state["exp_avg"].reshape(shape), state["exp_avg_sq"].reshape(shape)


def _as_param(name: str, shape: torch.Size, u: torch.Tensor) -> Dict[str, torch.Tensor]:
    """A direction of a matrix view in its parameter's shape (the split of a matrix without Kronecker factors)."""
    return {name: u.reshape(shape)}


def _out_of_basis(u: torch.Tensor, state: Dict[str, torch.Tensor]) -> torch.Tensor:
    r""":math:`U_G\,u\,U_A^T` with the basis kept in ``state`` (none: the raw coordinates), in ``u``'s dtype
    (:func:`_rotate`)."""
    Ua, Ug = state.get("U_A"), state.get("U_G")
    return u if Ua is None and Ug is None else _rotate(u, Ug, Ua.T if Ua is not None else None)


def _eigen_direction(state: Dict[str, torch.Tensor], betas: Tuple[float, float], eps: float,
                     grad: Optional[torch.Tensor] = None, work: Optional[torch.dtype] = None,
                     against: Optional[torch.Tensor] = None, null: Tuple[int, int] = (0, 0)) -> torch.Tensor:
    r""":math:`U_G\,[\hat m/(\sqrt{\hat v}+\epsilon)]\,U_A^T` of the moments and basis in ``state`` (no basis: the
    raw coordinates), by the same operations as :func:`eigen_steps` (so the same bits); ``grad``: the last
    gradient, for NAdam's first moment (:func:`adam_directions`); ``work``: the dtype to compute in; ``against``:
    the rotated gradient the direction is masked against (``cautious=True``; :func:`~.step.cautious_mask`, the
    factors' null dimensions ``null`` left out)."""
    w = _working(state, work or state["exp_avg"].dtype)
    u = adam_directions([w], betas, eps, grads=None if grad is None else [grad])[0]
    return _out_of_basis(u if against is None else cautious_mask([u], [against], {0: null})[0], state)


def pool_null(state: Dict[str, torch.Tensor], null: Tuple[int, int]) -> None:
    r"""Adam's second moment pooled over the null directions of a block's factors, in place: over the first
    :math:`k_A` columns within each row, then over the first :math:`k_G` rows within each column.

    A factor's null space (the directions its statistics never saw) has no preferred basis; an eigensolver
    returns whichever its rounding leads to.  With one second moment for all of them, the step there,
    :math:`\hat m/\sqrt{\hat v}` with :math:`m` a vector, turns with the basis: it is the same whatever
    basis the solver chose (and the factorisation need not choose one: :mod:`~..curvature.factor_eigh`)."""
    ka, kg = null
    v = state["exp_avg_sq"]
    if ka > 1:
        v[:, :ka] = v[:, :ka].mean(dim=1, keepdim=True)
    if kg > 1:
        v[:kg] = v[:kg].mean(dim=0, keepdim=True)


def rotated_gradient(state: Dict[str, torch.Tensor], g: Optional[torch.Tensor], basis: Optional[Basis],
                     rotated: Optional[torch.Tensor] = None, work: Optional[torch.dtype] = None,
                     held: Union[None, str, torch.dtype] = None) -> torch.Tensor:
    r"""The gradient :math:`\tilde g = U_G^T\bar WU_A` in ``basis`` (``None``: ``g`` itself), the moments in ``state``
    carried to that basis first (:func:`change_basis`) or created (zeros) at the first step; ``rotated``:
    :math:`\tilde g` already computed (from the batch's rows), in place of ``g``.  ``work``: the dtype the basis is
    used in (default: its own); ``held``: the moments held in that dtype where narrower
    (:func:`~infogeo.nn._params.held_dtype`)."""
    given = cast(torch.Tensor, rotated if rotated is not None else g)
    # computed in the basis' working dtype (float32 for half-precision parameters), held in ``held`` where narrower
    work = working_dtype(given.dtype if basis is None else work or _dtype(basis, given))
    _in_dtype(state, held_dtype(held, work) or work)
    if basis is not None:
        change_basis(state, basis, work)
        if rotated is not None:
            g = rotated.to(work)
        else:
            Ua, Ug = basis
            g = _rotate(cast(torch.Tensor, g).to(work), Ug.T if Ug is not None else None, Ua)
    g = working(cast(torch.Tensor, g))
    if "exp_avg" not in state:
        held_as = held_dtype(held, g.dtype) or g.dtype
        state["exp_avg"] = torch.zeros_like(g, dtype=held_as)
        state["exp_avg_sq"] = torch.zeros_like(g, dtype=held_as)
        state["step"] = torch.zeros((), dtype=torch.float64)
    return g


def eigen_adam(state: Dict[str, torch.Tensor], g: Optional[torch.Tensor], basis: Optional[Basis],
               betas: Tuple[float, float], eps: float, rotated: Optional[torch.Tensor] = None,
               null: Tuple[int, int] = (0, 0), nesterov: bool = False, cautious: bool = False) -> torch.Tensor:
    r"""Adam in a Kronecker eigenbasis: :math:`U_G\,[\hat m/(\sqrt{\hat v}+\epsilon)]\,U_A^T` (step rule
    ``"eigen-adam"``), for one block (:func:`eigen_steps` takes all of them at once, the same operations fused).

    ``g`` is a block's gradient :math:`\bar W` (``(out, in [+ 1])``, the weight and bias joined) and
    ``basis`` its eigenvectors ``(U_A, U_G)``; the moments :math:`m, v` are those of the rotated gradient
    :math:`\tilde g = U_G^T\bar WU_A`.  A basis other than the one the moments were kept in first carries
    them over (:func:`change_basis`).  ``basis=None``: Adam on the raw coordinates of ``g`` (a parameter
    without Kronecker factors).  ``rotated``: :math:`\tilde g` already computed (from the batch's rows), in
    place of ``g`` (which may then be ``None``).  ``null``: the dimensions ``(k_A, k_G)`` of the factors' null
    spaces, over which the second moment is pooled (:func:`pool_null`).  ``nesterov``: NAdam's look-ahead first
    moment; ``cautious``: the cautious mask against :math:`\tilde g` (module docstring).  Returns the unscaled step
    (the caller multiplies by :math:`-\eta`); ``state`` holds ``exp_avg``, ``exp_avg_sq``, ``step`` and the basis
    ``U_A``, ``U_G``.
    """
    g = rotated_gradient(state, g, basis, rotated)
    adam_moments([state], [g], betas)
    pool_null(state, null)
    # the basis change_basis left in the state
    return _eigen_direction(state, betas, eps, grad=g if nesterov else None, against=g if cautious else None,
                            null=null)


def _dtype(basis: Basis, g: torch.Tensor) -> torch.dtype:
    """The basis' dtype (a diagonal factor's side has no matrix: ``None``)."""
    return next((U.dtype for U in basis if U is not None), g.dtype)


def _rotate(V: torch.Tensor, left: Optional[torch.Tensor], right: Optional[torch.Tensor]) -> torch.Tensor:
    """``left @ V @ right`` in ``V``'s dtype with the basis as held (``None``: the identity): the large products of a
    basis held in bfloat16 in bfloat16 where the device multiplies it natively (:func:`~.._params.held_product`),
    the rest in ``V``'s dtype."""
    work = V.dtype
    V = V if left is None else held_product(left, V, work)
    V = V if right is None else held_product(V, right, work)
    return V.to(work)


def _in_dtype(state: Dict[str, torch.Tensor], dtype: torch.dtype) -> None:
    """The moments in ``state`` in ``dtype``, in place: ``torch.optim.Optimizer.load_state_dict`` casts a
    checkpoint's floating-point state to the parameter's dtype, which is not theirs where they are held in
    another (half-precision parameters, statistics kept in another ``factor_dtype``, ``state_dtype``)."""
    for key in ("exp_avg", "exp_avg_sq"):
        t = state.get(key)
        if t is not None and t.dtype != dtype:
            state[key] = t.to(dtype)


def change_basis(state: Dict[str, torch.Tensor], basis: Basis, work: Optional[torch.dtype] = None) -> None:
    r"""Carry the moments over to a new eigenbasis ``(U_A, U_G)`` (nothing to do if it is the one they are in).

    With the rotations :math:`R_G = U_G'^TU_G` and :math:`R_A = U_A'^TU_A` from the old basis to the
    new, the first moment (a vector) changes coordinates exactly, :math:`m' = R_G\,m\,R_A^T` (as SOAP
    rotates its first moment, Vyas et al. 2025).  The second moment is a diagonal matrix in the old basis;
    it becomes the diagonal of that matrix in the new one,
    :math:`v' = (R_G\odot R_G)\,v\,(R_A\odot R_A)^T`, which keeps the squared scale of every direction
    (and is :math:`v` itself when the basis only permutes or flips its vectors).  Computed in ``work`` (default:
    the moments' dtype; the large products of bases held in bfloat16 as :func:`~.._params.held_product` computes
    them) and held in the moments' dtype; the state keeps the basis as given (as held).
    """
    Ua, Ug = basis
    known = "U_A" in state or "U_G" in state
    old_a, old_g = state.get("U_A"), state.get("U_G")

    def same(old: Optional[torch.Tensor], new: Optional[torch.Tensor]) -> bool:
        # a checkpoint's basis comes back in the parameters' dtype (load_state_dict casts it), the block's as held
        return (old is None and new is None) or (old is not None and new is not None and
                                                  (old is new or torch.equal(old.to(new.dtype), new)))
    if known and "exp_avg" in state and not (same(old_a, Ua) and same(old_g, Ug)):
        dt, work = state["exp_avg"].dtype, work or state["exp_avg"].dtype
        # a side without a matrix (a diagonal factor) keeps its identity basis: no rotation there
        # bases held in bfloat16 multiply as the steps' rotations do (held_product)
        Ra = held_product(Ua.T, old_a, work) if Ua is not None and old_a is not None else None
        Rg = held_product(Ug.T, old_g, work) if Ug is not None and old_g is not None else None
        state["exp_avg"] = _rotate(state["exp_avg"].to(work), Rg, Ra.T if Ra is not None else None).to(dt)
        state["exp_avg_sq"] = _rotate(state["exp_avg_sq"].to(work), Rg.square() if Rg is not None else None,
                                      Ra.square().T if Ra is not None else None).to(dt)
    for key, U in (("U_A", Ua), ("U_G", Ug)):
        if U is None:
            state.pop(key, None)
        else:
            state[key] = U

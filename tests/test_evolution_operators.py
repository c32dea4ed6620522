"""Evolution operators: what every child keeps, what each operator changes, and that the
low-rank algebra agrees with dense linear algebra on small modules."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save

from evolution import OPERATORS, EvolutionError, delta_distance, get_operator, group_modules, operator_names
from evolution.crossovers import interpolate, slot_swap, splice
from evolution.mutations import gaussian, mask, rotate, sv_perturb

MUTATIONS = operator_names("mutation")
CROSSOVERS = operator_names("crossover")


def adapter(seed: int, shapes=((16, 12), (6, 12), (12, 20)), rank: int = 3, dtype=torch.float32, zero_b=False):
    """A trained-looking PEFT state dict: Kaiming-scaled A, small B (zero for a fresh one)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for i, (out, inp) in enumerate(shapes):
        prefix = f"base_model.model.model.layers.{i}.mlp.proj"
        state[f"{prefix}.lora_A.weight"] = (torch.randn(rank, inp, generator=g) / inp**0.5).to(dtype)
        b = torch.zeros(out, rank) if zero_b else torch.randn(out, rank, generator=g) * 0.1
        state[f"{prefix}.lora_B.weight"] = b.to(dtype)
    return state


def parents_for(name, *states):
    return list(states[: OPERATORS[name].n_parents])


def assert_same_delta(got, want):
    """Equal up to the Gram route's accuracy: ~1e-8 of the matrix's scale in float64."""
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7 * float(want.abs().max()))


def deltas(state):
    return [b.double() @ a.double() for a, b in group_modules(state).values()]


adapters = st.builds(
    lambda seed, shapes, rank, dtype: (adapter(seed, shapes, rank, dtype), adapter(seed + 1, shapes, rank, dtype)),
    seed=st.integers(0, 10_000),
    shapes=st.lists(st.tuples(st.integers(8, 24), st.integers(8, 24)), min_size=1, max_size=3),
    rank=st.integers(1, 4),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)


@settings(max_examples=25, deadline=None)
@given(pair=adapters, name=st.sampled_from(list(OPERATORS)), strength=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_every_child_keeps_keys_shapes_dtypes_and_rank_at_most_r(pair, name, strength, seed):
    child = get_operator(name).apply(parents_for(name, *pair), strength, seed)
    parent = pair[0]
    assert list(child) == list(parent)
    for key in parent:
        assert child[key].shape == parent[key].shape
        assert child[key].dtype == parent[key].dtype
        assert torch.isfinite(child[key].float()).all()
    rank = next(iter(group_modules(parent).values()))[0].shape[0]
    for delta in deltas(child):
        assert torch.linalg.matrix_rank(delta) <= rank


@settings(max_examples=20, deadline=None)
@given(pair=adapters, name=st.sampled_from(MUTATIONS), seed=st.integers(0, 2**31))
def test_a_zero_strength_mutation_returns_the_parent_bit_for_bit(pair, name, seed):
    child = get_operator(name).apply([pair[0]], 0.0, seed)
    assert all(torch.equal(child[k], pair[0][k]) for k in pair[0])


@settings(max_examples=20, deadline=None)
@given(pair=adapters, strength=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_slot_swap_of_identical_parents_is_the_parent(pair, strength, seed):
    child = slot_swap(pair[0], pair[0], strength, seed)
    assert all(torch.equal(child[k], pair[0][k]) for k in pair[0])


def test_slot_swap_takes_each_module_whole_from_one_parent():
    first, second = adapter(1, shapes=[(10, 10)] * 8), adapter(2, shapes=[(10, 10)] * 8)
    child = slot_swap(first, second, 0.5, seed=3)
    sources = []
    for name in group_modules(first):
        a_key, b_key = f"{name}.lora_A.weight", f"{name}.lora_B.weight"
        from_first = torch.equal(child[a_key], first[a_key]) and torch.equal(child[b_key], first[b_key])
        from_second = torch.equal(child[a_key], second[a_key]) and torch.equal(child[b_key], second[b_key])
        assert from_first != from_second
        sources.append(from_second)
    assert 0 < sum(sources) < len(sources)
    assert all(torch.equal(slot_swap(first, second, 1.0)[k], second[k]) for k in first)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), rank=st.integers(1, 4))
def test_interpolation_at_t_1_and_t_0_gives_each_parents_delta(seed, rank):
    first, second = adapter(seed, rank=rank, dtype=torch.float64), adapter(seed + 1, rank=rank, dtype=torch.float64)
    for strength, expected in ((0.0, first), (1.0, second)):
        for got, want in zip(deltas(interpolate(first, second, strength)), deltas(expected)):
            assert_same_delta(got, want)


@settings(max_examples=20, deadline=None)
@given(pair=adapters, strength=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_splice_and_interpolation_of_identical_parents_keep_the_delta(pair, strength, seed):
    parent = pair[0]
    tol = {torch.float64: 1e-6, torch.float32: 1e-5, torch.bfloat16: 2e-2}[parent[next(iter(parent))].dtype]
    for op in (splice, interpolate):
        for got, want in zip(deltas(op(parent, parent, strength, seed)), deltas(parent)):
            torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()))


def test_interpolation_averages_deltas_not_factors():
    """A reparameterised copy (B M, M^-1 A) has the same delta; averaging factors would not."""
    parent = adapter(5, dtype=torch.float64)
    m = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 3.0]], dtype=torch.float64)
    twin = {}
    for name, (a, b) in group_modules(parent).items():
        twin[f"{name}.lora_A.weight"], twin[f"{name}.lora_B.weight"] = torch.linalg.solve(m, a), b @ m
    for got, want in zip(deltas(interpolate(parent, twin, 0.5)), deltas(parent)):
        assert_same_delta(got, want)
    naive = [((b + b @ m) / 2) @ ((a + torch.linalg.solve(m, a)) / 2) for a, b in group_modules(parent).values()]
    assert any(not torch.allclose(n, w) for n, w in zip(naive, deltas(parent)))


def test_interpolation_is_the_best_rank_r_approximation_of_the_mixed_delta():
    first, second = adapter(7, dtype=torch.float64), adapter(8, dtype=torch.float64)
    for got, d1, d2 in zip(deltas(interpolate(first, second, 0.3)), deltas(first), deltas(second)):
        u, s, vh = torch.linalg.svd(0.7 * d1 + 0.3 * d2)
        best = u[:, :3] @ torch.diag(s[:3]) @ vh[:3]
        assert_same_delta(got, best)


def test_splice_keeps_parent_1_leading_components_and_takes_the_rest_from_parent_2():
    first, second = adapter(7, dtype=torch.float64), adapter(8, dtype=torch.float64)
    child = splice(first, second, 0.5, seed=4)
    for got, d1, d2 in zip(deltas(child), deltas(first), deltas(second)):
        u1, s1, vh1 = torch.linalg.svd(d1)
        u2, s2, vh2 = torch.linalg.svd(d2)
        matches = [
            (u1[:, :k] * s1[:k]) @ vh1[:k] + (u2[:, k:3] * s2[k:3]) @ vh2[k:3] for k in range(4)
        ]
        assert any(torch.allclose(got, m, rtol=1e-6, atol=1e-7 * float(m.abs().max())) for m in matches)


def test_sv_perturb_keeps_a_and_the_singular_vectors_and_changes_the_values():
    parent = adapter(3, dtype=torch.float64)
    child = sv_perturb(parent, 0.3, seed=1)
    for name, (a, _) in group_modules(parent).items():
        assert torch.equal(child[f"{name}.lora_A.weight"], a)
    for got, want in zip(deltas(child), deltas(parent)):
        u, s, vh = torch.linalg.svd(want)
        cu, cs, cvh = torch.linalg.svd(got)
        assert not torch.allclose(cs[:3], s[:3])
        # Same left and right subspaces: projecting onto the parent's leaves the child unchanged.
        assert_same_delta(u[:, :3] @ u[:, :3].T @ got @ vh[:3].T @ vh[:3], got)


def test_rotation_moves_the_subspaces_and_keeps_singular_values_and_norms():
    parent = adapter(3, shapes=[(32, 24), (24, 40)], rank=4, dtype=torch.float64)
    child = rotate(parent, 0.2, seed=1)
    for key in parent:
        torch.testing.assert_close(child[key].norm(), parent[key].norm(), rtol=1e-6, atol=0)
    for got, want in zip(deltas(child), deltas(parent)):
        assert_same_delta(torch.linalg.svdvals(got)[:4], torch.linalg.svdvals(want)[:4])
        u = torch.linalg.svd(want).U[:, :4]
        cu = torch.linalg.svd(got).U[:, :4]
        cosines = torch.linalg.svdvals(u.T @ cu)  # cosines of the principal angles
        assert cosines.min() < 0.999 and cosines.min() > 0.8


def test_rotating_one_side_only_leaves_the_other_factor_untouched():
    parent = adapter(3, shapes=[(32, 24)], rank=4)
    left, right = rotate(parent, 0.3, seed=1, side="left"), rotate(parent, 0.3, seed=1, side="right")
    a_key = next(k for k in parent if "lora_A" in k)
    b_key = next(k for k in parent if "lora_B" in k)
    assert torch.equal(left[a_key], parent[a_key]) and not torch.equal(left[b_key], parent[b_key])
    assert torch.equal(right[b_key], parent[b_key]) and not torch.equal(right[a_key], parent[a_key])


def test_mask_drops_whole_svd_components_and_keeps_the_rest():
    parent = adapter(3, shapes=[(16, 12)] * 6, rank=4, dtype=torch.float64)
    child = mask(parent, 0.5, seed=2)
    ranks = []
    for got, want in zip(deltas(child), deltas(parent)):
        s, cs = torch.linalg.svdvals(want)[:4], torch.linalg.svdvals(got)[:4]
        kept = cs[cs > 1e-9 * s[0]]
        ranks.append(len(kept))
        # Every kept singular value is one of the parent's.
        assert all(torch.isclose(s, v, rtol=1e-6).any() for v in kept)
    assert min(ranks) < 4
    assert torch.equal(mask(parent, 1.0)[next(iter(parent))], parent[next(iter(parent))])  # A kept
    assert all(float(d.abs().max()) < 1e-12 for d in deltas(mask(parent, 1.0)))


@pytest.mark.parametrize("name", list(OPERATORS))
def test_the_same_seed_gives_the_same_child_and_another_seed_another(name):
    first, second = adapter(1, shapes=[(16, 12)] * 6), adapter(2, shapes=[(16, 12)] * 6)
    spec = get_operator(name)
    make = lambda seed: spec.apply(parents_for(name, first, second), 0.4, seed)  # noqa: E731
    one, again, other = make(11), make(11), make(12)
    assert all(torch.equal(one[k], again[k]) for k in one)
    differs = any(not torch.equal(one[k], other[k]) for k in one)
    assert differs == spec.stochastic


def test_a_torch_generator_can_drive_an_operator():
    parent = adapter(1)
    child_a = gaussian(parent, 0.2, torch.Generator().manual_seed(5))
    child_b = gaussian(parent, 0.2, 5)
    assert all(torch.equal(child_a[k], child_b[k]) for k in parent)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_more_strength_moves_the_child_further_from_parent_1(name):
    first, second = adapter(1, shapes=[(16, 12)] * 8), adapter(2, shapes=[(16, 12)] * 8)
    spec = get_operator(name)
    means = []
    for strength in (0.05, 0.3, 0.9):
        runs = [delta_distance(first, spec.apply(parents_for(name, first, second), strength, s)) for s in range(6)]
        means.append(sum(runs) / len(runs))
    assert means[0] < means[1] < means[2]


@pytest.mark.parametrize("name", list(OPERATORS))
def test_children_of_fresh_adapters_with_zero_b_are_finite(name):
    first, second = adapter(1, zero_b=True), adapter(2, zero_b=True)
    child = get_operator(name).apply(parents_for(name, first, second), 0.5, 0)
    assert all(torch.isfinite(v).all() for v in child.values())
    assert all(float(d.abs().max()) == 0 for d in deltas(child))


@pytest.mark.parametrize("name", list(OPERATORS))
def test_a_child_owns_its_tensors_and_saves_as_safetensors(name):
    first, second = adapter(1), adapter(2)
    copies = {k: v.clone() for k, v in first.items()}
    child = get_operator(name).apply(parents_for(name, first, second), 0.0, 0)
    save(child)  # raises if tensors share memory
    for value in child.values():
        value.add_(1.0)
    assert all(torch.equal(first[k], copies[k]) for k in first)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_ranks_beyond_a_small_modules_dimensions_still_work(name):
    """r = 5 on 4 x 6 and 6 x 3 modules: the Gram route handles rank-deficient factors, and
    rotation couples only the directions that exist (2r > d), staying orthogonal."""
    first = adapter(1, shapes=[(4, 6), (6, 3)], rank=5, dtype=torch.float64)
    second = adapter(2, shapes=[(4, 6), (6, 3)], rank=5, dtype=torch.float64)
    child = get_operator(name).apply(parents_for(name, first, second), 0.3, 0)
    assert all(torch.isfinite(v).all() and v.shape == first[k].shape for k, v in child.items())
    if name == "rotate":
        for key in first:
            torch.testing.assert_close(child[key].norm(), first[key].norm(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_live_trainable_parents_give_a_child_without_autograd_history(name):
    first = {k: v.requires_grad_(True) for k, v in adapter(1).items()}
    second = {k: v.requires_grad_(True) for k, v in adapter(2).items()}
    child = get_operator(name).apply(parents_for(name, first, second), 0.3, 0)
    assert all(not v.requires_grad and v.grad_fn is None for v in child.values())


def test_modules_of_other_shapes_and_extra_keys_pass_through():
    first = adapter(1) | {"base_model.model.lm_head.modules_to_save.default.weight": torch.ones(3)}
    child = sv_perturb(first, 0.2, seed=0)
    assert torch.equal(child["base_model.model.lm_head.modules_to_save.default.weight"], torch.ones(3))


def test_bad_input_is_rejected_with_a_clear_message():
    first, second = adapter(1), adapter(2, rank=2)
    with pytest.raises(EvolutionError, match="shape"):
        interpolate(first, second)
    with pytest.raises(EvolutionError, match="strength"):
        gaussian(first, -0.1)
    with pytest.raises(EvolutionError, match=r"\[0, 1\]"):
        slot_swap(first, first, 1.5)
    with pytest.raises(EvolutionError, match="takes 2 parent"):
        get_operator("splice").apply([first])
    with pytest.raises(EvolutionError, match="known: gaussian"):
        get_operator("average_factors")
    with pytest.raises(EvolutionError, match="no LoRA modules"):
        gaussian({"w": torch.ones(2)}, 0.1)


def test_registry_lists_four_mutations_and_three_crossovers():
    assert set(MUTATIONS) == {"gaussian", "sv_perturb", "rotate", "mask"}
    assert set(CROSSOVERS) == {"slot_swap", "splice", "interpolate"}
    assert all(spec.preserves for spec in OPERATORS.values())

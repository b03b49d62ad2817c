"""Busiest expert-parallel rank's routed tokens / the mean, forced and dropless (issue 13, skew).

Every EP rank waits for the busiest one at the combine, so a MoE layer's expert GEMMs and
all-to-all run at the busiest rank's load. With E experts, top-k routing and `ep` ranks of
m = E/ep experts each, one micro-batch routes N distinct tokens into the EP group (each rank's
tokens, summed over the group), and rank r receives L_r token copies, mean N·k/ep. Two sources
spread L_r, and the busiest rank is the expected maximum over the ep ranks:

* systematic skew: expert i draws a share of the tokens that differs from 1/E with coefficient of
  variation c across experts (the router's preferences on real text). A rank sums m experts drawn
  without replacement from E, so its share has CV c·sqrt((E−m)/(m·(E−1))) (finite-population
  correction; experts are placed on ranks without regard to their popularity);
* sampling: given the shares, each token puts its k distinct experts on rank r a hypergeometric
  number of times, variance k·p·(1−p)·(E−k)/(E−1) with p = m/E (`token_rank_variance`); over N
  tokens the rank's CV is sqrt((1−p)·(E−k) / ((E−1)·N·k·p)).

`routing = "round_robin"` (NeMo AutoModel's benchmark gate, ep_dispatch.round_robin_groups_hit)
gives every expert the same count: busiest rank = mean, no spread.
`routing = "balanced"` is Megatron-Core's forced balancing and has the sampling spread only
(`FORCED_EXPERT_LOAD_CV` = 0): with `moe_router_force_load_balancing` the router replaces its
logits by `apply_random_logits` (megatron/core/transformer/moe/router.py:861-863), RandomSTE's
`logits.clone().normal_()`, a fresh standard-normal draw per token and expert on every forward
(moe_utils.py:1258-1305, NVIDIA/Megatron-LM@d98e8a64dd); every Megatron-Bridge performance
recipe that does not drop tokens sets it (scripts/performance/utils/overrides.py:455-462,
NVIDIA-NeMo/Megatron-Bridge@067f987df0; container 25.09, 684a68616: run_script.py:77-78,
DeepSeek-V3 with DeepEP only).
The top-k of E iid continuous draws is a uniformly random k-subset of the experts (the draws are
exchangeable and tie with probability 0; softmax and sigmoid scores keep their order), the same
for every token and independent across tokens, so a token's copies on rank r are exactly
Hypergeometric(E, m, k) -- k experts drawn without replacement, the m of rank r marked -- and
L_r is the sum of N iid such counts: mean N·k·p, variance N·k·p·(1−p)·(E−k)/(E−1), the
Binomial(N·k, p) variance times the without-replacement factor (E−k)/(E−1) (checked against the
exact pmf in tests/test_routing_skew.py). Assumed away there: group-limited top-k
(moe_utils.py `group_limited_topk`; DeepSeek-V3's config.json n_group = 8, topk_group = 4, which
Megatron-Bridge maps to moe_router_num_groups / moe_router_group_topk, model_bridge.py:487-488
@067f987df0: top-4 groups by their top-2 scores) keeps each expert's probability k/E but
clusters a token's picks into its chosen groups, which raises a rank's per-token variance; a
Monte-Carlo of 200,000 random-logit tokens with sigmoid scores (run for this note with numpy;
the model does not use it) gave ×1.58, ×1.25, ×1.11 and
×1.05 over the hypergeometric for E = 256, k = 8 at EP 8, 16, 32, 64, i.e. DeepSeek-V3's forced
factor 1.0078 → ~1.0098 at EP8 and 1.0128 → ~1.0131 at EP64, one micro-batch of 4,096 tokens
per rank (mfusim knows `max_nodes_per_token`, not Megatron's group count). The aux-loss-free
expert bias (`moe_router_enable_expert_bias`) is updated from these random counts and is taken as
zero. Token dropping with `moe_pad_expert_input_to_capacity` (capacity factor 1.0) pads every
expert to the same capacity: exactly balanced, `load_imbalance = 1` (mfusim validate sets it on
the "(tokendrop)" rows).

An auxiliary balancing loss does not change a step's routing: Megatron-Core's TopKRouter.routing
takes the top-k of the trained router's scores and only attaches the loss's gradient to the
probabilities (router.py:779-833, MoEAuxLossAutoScaler), so an aux-loss-trained router on real
text keeps the trained skew -- the `dropless` default, whose c comes from such checkpoints
(Qwen3-30B-A3B was trained with the global-batch load-balancing loss: Qwen3 technical report,
arXiv 2505.09388, §2). There is no separate "aux-loss" routing: `balanced` is forced.

The rank loads sum to N·k, so they are exchangeable with correlation −1/(ep−1); for normal
loads of CV σ the expected maximum is 1 + σ·z(ep)·sqrt(ep/(ep−1)), z(n) = E[max of n iid N(0,1)]
(X_i = Y_i − Ȳ of iid Y has variance (1−1/n)·Var Y and the same expected maximum). This is a
normal approximation, not an exact computation (the exact law of the maximum of ep dependent sums
of hypergeometrics has no usable closed form). Its error is the loads' right skew, ≈ 1/sqrt(N·k·p)
copies per rank, which raises the true maximum by about σ·skew·(z²−1)/6 (Cornish–Fisher):
tests/test_routing_skew.py samples Megatron's mechanism (top-k of iid normal logits, 2,000
draws) and finds the closed form 1.2–2.0% of the excess low at 128–256 copies per rank; the
error falls as 1/sqrt(copies), to ~0.2% of the excess (~2e-5 of the load) at the ≥ 16,384
copies per rank of the validated MoE rows. The factor is capped where one rank takes every copy its m
experts can hold: ep·min(k, m)/k.

Sources for c (`DROPLESS_EXPERT_LOAD_CV`): Ma et al., "Diagnosing Overhead in Dispatch Operations"
(DODOCO, arXiv 2605.20982, abstract): per-expert token Gini of five trained MoE checkpoints on
real text, H100, EP 4-32: DeepSeek-MoE-16B 0.105 and Nemotron-30B 0.150 on wikitext, DeepSeek-V2-Lite
and Qwen3.5-35B above 0.24 on every real-text condition, Qwen3-30B (GQA) between; real-text Gini
does not change with batch size (a systematic skew, not sampling). Per-rank token counts of
DeepSeek-V3 layers are best fitted by a log-normal (deepseek-ai/DeepEP PR #393, MMLU-Pro traces);
a log-normal of Gini G has σ_ln = √2·Φ⁻¹((1+G)/2) (G = 2Φ(σ_ln/√2) − 1) and
CV = sqrt(exp(σ_ln²) − 1): G 0.105 → CV 0.19, 0.15 → 0.27, 0.19 → 0.35, 0.24 → 0.45. The default
takes Qwen3-30B's bracket midpoint, G ≈ 0.19, CV 0.35 (range 0.27–0.45; 0.19 for the most
balanced checkpoint). Checks of the whole model against measurements it was not fitted to:
forced-balanced traffic on 64 GB200 (EP64, E = 256, k = 8, 4,096 tokens per rank) measured a
busiest-rank overload of ~1.013 averaged over steps (marin-community/marin issue #7668, an
agent-run Megatron measurement on mock data; forced routing ignores the data), and the
sampling term alone gives 1.013 there; UltraEP (arXiv 2606.04101, abstract) measured inter-rank
imbalance 1.30–4.01 without balancing for 106B–671B MoE models at rack-scale EP, and the model
gives 1.40 for DeepSeek-V3 at EP64 with c = 0.35.

Not modeled: node-limited / group-limited routing (it constrains which ranks a token can reach;
for forced balancing its size is estimated above), imbalance that grows or shrinks during training,
and per-layer differences (one c for every layer).
"""

from __future__ import annotations

import math

# Coefficient of variation of the experts' token shares under natural (dropless) routing of a
# trained model on real text; module docstring: DODOCO Gini ~0.19 for Qwen3-30B -> log-normal CV.
DROPLESS_EXPERT_LOAD_CV = 0.35
# Forced balancing (random router logits, module docstring): every expert's expected share is
# exactly 1/E; only the sampling of the micro-batch's tokens spreads the ranks.
FORCED_EXPERT_LOAD_CV = 0.0
_QUAD_LO, _QUAD_HI, _QUAD_STEPS = -9.0, 9.0, 1800


def expected_max_std_normal(n: int) -> float:
    """E[max of n iid standard normals]: ∫ x·n·φ(x)·Φ(x)^(n−1) dx by the trapezoid rule on
    [−9, 9] (the integrand is below 1e-15 outside it for n ≤ 1e6). z(1) = 0, z(2) = 1/√π,
    z(3) = 3/(2√π) exactly."""
    if n <= 1:
        return 0.0
    step = (_QUAD_HI - _QUAD_LO) / _QUAD_STEPS
    total = 0.0
    for i in range(_QUAD_STEPS + 1):
        x = _QUAD_LO + i * step
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        weight = 0.5 if i in (0, _QUAD_STEPS) else 1.0
        total += weight * x * n * pdf * cdf ** (n - 1)
    return total * step


def token_rank_variance(num_experts: int, top_k: int, experts_per_rank: float) -> float:
    """Variance of one token's copies on one EP rank under uniform random top-k routing: k of E
    experts drawn without replacement, the rank holding m of them -- Hypergeometric(E, m, k),
    variance k·p·(1−p)·(E−k)/(E−1) with p = m/E (module docstring)."""
    e, k, m = num_experts, min(top_k, num_experts), experts_per_rank
    if e <= 1:
        return 0.0
    p = m / e
    return k * p * (1.0 - p) * (e - k) / (e - 1)


def busiest_rank_factor(num_experts: int, top_k: int, ep: int, tokens: int, expert_load_cv: float) -> float:
    """Expected busiest EP rank's token copies / the mean (module docstring): `tokens` distinct
    tokens routed into the EP group per micro-batch, top-`top_k` of `num_experts`, `ep` ranks of
    num_experts/ep experts, expert shares with coefficient of variation `expert_load_cv`."""
    if ep <= 1 or num_experts <= 1 or top_k <= 0 or tokens <= 0:
        return 1.0
    e, k = num_experts, min(top_k, num_experts)
    m = e / ep
    p = m / e
    cv2_sys = expert_load_cv**2 * (e - m) / (m * (e - 1))
    cv2_sample = token_rank_variance(e, k, m) / (tokens * (k * p) ** 2)
    sigma = math.sqrt(cv2_sys + cv2_sample)
    factor = 1.0 + sigma * expected_max_std_normal(ep) * math.sqrt(ep / (ep - 1))
    return min(factor, ep * min(k, m) / k)

"""From a framework's option to the stalebench estimator that computes the same loss (`stalebench estimators --from F`).

Each row names what backs it:
  golden:       tests/data/golden/<file>#<case>: the framework's own functions, run on a fixed batch, give this
                estimator's loss and gradient to 1e-6 (tests/test_algorithms_golden.py);
  coincidence:  tests/test_algorithms_framework_map.py::<test>: the estimator's gradient equals that of an estimator
                with a golden row on the coincidence probes (algorithms/coincidence.py), in the regime the test names;
A row whose estimator is None is an option stalebench does not compute as an estimator; its note says why, and its
`setting` names the run-config setting that does it where there is one (train.prox_logp: tests/data/areal_prox_logp.json).
Parameter values written <lo>, <hi>, <option>, <t> stand for the framework's values. Commits: verl b178a3cd56f5 (volcengine/verl; dppo_tv, dppo_kl and dro:
verl-project/verl 1dda039b9c63; the policy losses vanilla, cispo, gspo, sapo and geo_mean: both),
OpenRLHF 3c3be6234e0c, NeMo-RL 7ea279abfbeb, SkyRL a9564572eb8e, TRL f2cd57710ae3,
AReaL 4aef98d8d818, prime-rl 559b44772e47 (the full hashes are in each estimator's docstring and the golden files).

    python -m algorithms.framework_map > docs/framework-map.md      # the docs page (a test keeps it current)
"""
from __future__ import annotations

from dataclasses import dataclass, field

FRAMEWORKS = ("verl", "areal", "trl", "openrlhf", "nemo-rl", "skyrl", "prime-rl")
V, O, S = "golden: verl_rollout_corr.json#", "golden: openrlhf_policy_loss.json#", "golden: skyrl_off_policy.json#"
ONE_PER_OPTION = " (and one case per option)"
ONE_PER_SETTING = " (and one case per setting)"
P, AR = "golden: verl_policy_losses.json#", "golden: areal_rejection.json#"
IP = "golden: verl_icepop.json#"
GEO, K3 = {}, {"rs": "seq_mean_k3", "rs_threshold": 0.01}
GSPO = "clip_ratio_low 3e-4, clip_ratio_high 4e-4: examples/gspo_trainer"
SAMPLER = "old_log_prob = the sampler's log-probs, as stalebench's π_b"
PER_SEQ = "the suite's aggregation seq-mean-token-mean (verl aggregates this loss per sequence whatever loss_agg_mode)"
TRL_BOUNDS = ("TRL's default loss_type dapo (token-mean); clip_min / clip_max: cap_low / cap (cases with bounds that "
              "bind in the same file)")
TRL_SEQ = "ours clamps the sequence log-weight at ±20, TRL does not"
T = "golden: trl_grpo_is.json#"
COIN = "coincidence: tests/test_algorithms_framework_map.py::"
PROX = "golden: tests/data/areal_prox_logp.json (tests/test_prox_logp.py)"


@dataclass(frozen=True)
class Row:
    framework: str
    option: str                               # the framework's option, preset or setting
    estimator: str | None                     # the stalebench estimator (None: not computed by stalebench)
    params: dict[str, object] = field(default_factory=dict)
    backed_by: str = ""
    note: str = ""
    setting: str = ""                         # with no estimator: the run-config setting that does it, if any


def _verl() -> list[Row]:
    ac = "algorithm.rollout_correction"
    rows = [
        Row("verl", f"{ac} preset decoupled_geo_rs", "rollout_rs", GEO, V + "decoupled_geo_rs", "Geo-RS: seq_mean_k1 0.999_1.001"),
        Row("verl", f"{ac} preset decoupled_geo_rs_seq_tis", "rollout_rs", {"is_level": "sequence"}, V + "decoupled_geo_rs_seq_tis"),
        Row("verl", f"{ac} preset decoupled_geo_rs_token_tis", "rollout_rs", {"is_level": "token"}, V + "decoupled_geo_rs_token_tis"),
        Row("verl", f"{ac} preset decoupled_k3_rs", "rollout_rs", K3, V + "decoupled_k3_rs"),
        Row("verl", f"{ac} preset decoupled_k3_rs_token_tis", "rollout_rs", {**K3, "is_level": "token"},
            V + "decoupled_k3_rs_token_tis"),
        Row("verl", f"{ac} preset decoupled_k3_rs_seq_tis", "rollout_rs", {**K3, "is_level": "sequence"},
            V + "decoupled_k3_rs_seq_tis"),
        Row("verl", f"{ac} preset decoupled_seq_is_rs", "rollout_rs",
            {"rs": "seq_sum_k1", "rs_threshold": "0.5_2.0", "is_level": "sequence"}, V + "decoupled_seq_is_rs"),
        Row("verl", f"{ac} preset decoupled_token_is", "rollout_rs", {"rs": None, "is_level": "token"}, V + "decoupled_token_is",
            "= tis (cap 2) where verl's dual clip is inactive (" + COIN + "test_verl_presets_and_the_field)"),
        Row("verl", f"{ac} preset decoupled_seq_is", "rollout_rs", {"rs": None, "is_level": "sequence"}, V + "decoupled_seq_is",
            "= tis_seq (cap 2) where verl's dual clip is inactive"),
        Row("verl", f"{ac} rollout_rs=<option> rollout_rs_threshold=<t> (token_k1..k3, seq_sum_k1..k3, seq_mean_k1..k3, "
            "seq_max_k2, seq_max_k3; comma-chained)", "rollout_rs", {"rs": "<option>", "rs_threshold": "<t>"},
            V + "rollout_rs=seq_mean_k2 rollout_rs_threshold=0.001" + ONE_PER_OPTION,
            "a k1 threshold lower_upper bounds π_rollout/π_old, the inverse of the IS ratio"),
        Row("verl", f"{ac} rollout_is_batch_normalize true (with rollout_is)", "rollout_rs",
            {"is_level": "<level>", "is_batch_normalize": True}, V + "decoupled_seq_is + rollout_is_batch_normalize",
            "bypass mode: rollout_rs_bypass with the same parameters (the step batch's mean; verl: the micro-batch's)"),
        Row("verl", f"{ac} preset bypass_ppo_clip", "rollout_rs_bypass", {"rs": None}, V + "bypass_ppo_clip [all]",
            "= grpo with dual_clip 3 (" + COIN + "test_verl_presets_and_the_field)"),
        Row("verl", f"{ac} preset bypass_pg_is", "rollout_rs_bypass", {"rs": None, "loss": "pg", "is_level": "sequence"},
            V + "bypass_pg_is [all]"),
    ]
    for preset, params in (("bypass_ppo_clip_geo_rs", {}), ("bypass_ppo_clip_k3_rs", dict(K3)),
                           ("bypass_pg_geo_rs", {"loss": "pg"}),
                           ("bypass_pg_geo_rs_seq_tis", {"loss": "pg", "is_level": "sequence"}),
                           ("bypass_pg_geo_rs_token_tis", {"loss": "pg", "is_level": "token"})):
        rows.append(Row("verl", f"{ac} preset {preset} (engine workers: all tokens)", "rollout_rs_bypass", params,
                        V + f"{preset} [all]"))
        rows.append(Row("verl", f"{ac} preset {preset} (the bare loss: tokens kept)", "rollout_rs_bypass",
                        {**params, "normalize": "kept"}, V + f"{preset} [kept]"))
    rows += [
        Row("verl", "actor.policy_loss.loss_mode vanilla (clip_ratio_c 3)", "grpo", {"dual_clip": 3.0},
            P + "loss_mode vanilla (clip_ratio 0.2, clip_ratio_c 3.0)",
            f"eps = clip_ratio, eps_high = clip_ratio_high; {SAMPLER}"),
        Row("verl", "actor.policy_loss.loss_mode cispo", "cispo", {}, P + "loss_mode cispo (clip_ratio 0.2)",
            f"eps_low / eps_high = clip_ratio_low / _high; {SAMPLER}"),
        Row("verl", f"actor.policy_loss.loss_mode gspo ({GSPO})", "gspo", {}, P + f"loss_mode gspo ({GSPO})",
            f"{PER_SEQ}; other clip ratios: eps_low, eps_high "
            "(verl's default 0.2: the case loss_mode gspo (clip_ratio 0.2))"),
        Row("verl", "actor.policy_loss.loss_mode sapo (tau_pos 1.0, tau_neg 1.05)", "sapo", {},
            P + "loss_mode sapo (tau_pos 1.0, tau_neg 1.05)", PER_SEQ),
        Row("verl", "actor.policy_loss.loss_mode geo_mean", "geo_mean", {}, P + "loss_mode geo_mean (clip_ratio 0.2)",
            f"{PER_SEQ}; verl divides by the token count + 1e-8"),
        Row("verl", "actor.policy_loss.loss_mode dppo_tv (clip_ratio δ, actor clip_ratio_c 3.0)", "dppo_binary", {},
            P + "loss_mode dppo_tv (clip_ratio 0.2, clip_ratio_c 3.0)", "suite eps = clip_ratio (a TV threshold); verl-project 1dda039b"),
        Row("verl", "actor.policy_loss.loss_mode dppo_kl (clip_ratio δ, actor clip_ratio_c 3.0)", "dppo_binary",
            {"divergence": "kl"}, P + "loss_mode dppo_kl (clip_ratio 0.05, clip_ratio_c 3.0)",
            "suite eps = clip_ratio (a binary-KL threshold, 0.05 in verl's example)"),
        Row("verl", "actor.policy_loss.loss_mode dro (policy_loss.dro_beta β)", "dro", {"beta": "<β>"},
            P + "loss_mode dro (dro_beta 0.1)"),
        Row("verl", f"{ac} preset decoupled_token_icepop (verl-project 1dda039b)", "rollout_rs",
            {"rs": None, "is_level": "token", "is_threshold": "0.5_5.0"}, IP + "decoupled_token_icepop",
            "= icepop where verl's dual clip is inactive (" + COIN + "test_verl_presets_and_the_field)"),
        Row("verl", f"{ac} preset bypass_pg_token_icepop (verl-project 1dda039b)", "rollout_rs_bypass",
            {"rs": None, "loss": "pg", "is_level": "token", "is_threshold": "0.5_5.0"}, IP + "bypass_pg_token_icepop [all]"),
        Row("verl", f"{ac} rollout_is=<level> rollout_is_threshold=<lo>_<hi> (IcePop, verl-project 1dda039b)", "rollout_rs",
            {"is_level": "<level>", "is_threshold": "<lo>_<hi>"}, IP + "rollout_is=sequence rollout_is_threshold=0.9_1.1"),
    ]
    return rows


def _others() -> list[Row]:
    thr = "--algo.advantage.is_correction_threshold"
    nemo = "loss_fn.truncated_importance_sampling"
    opc = "trainer.algorithm.off_policy_correction"
    nm = "golden: nemo_rl_clipped_pg.json#loss_fn.truncated_importance_sampling_type "
    return [
        Row("openrlhf", f"--algo.advantage.is_correction_type seq-mask-tis {thr} 0.5 5.0", "seq_mask_tis", {},
            O + f"--algo.advantage.is_correction_type seq-mask-tis {thr} 0.5 5.0"),
        Row("openrlhf", f"--algo.advantage.is_correction_type seq-mask-tis {thr} <lo> <hi>", "seq_mask_tis",
            {"cap_low": "<lo>", "cap": "<hi>"}, O + f"--algo.advantage.is_correction_type seq-mask-tis {thr} 0.99 1.01"),
        Row("openrlhf", f"--algo.advantage.is_correction_type icepop {thr} <lo> <hi>", "icepop", {"cap_low": "<lo>", "cap": "<hi>"},
            O + f"--algo.advantage.is_correction_type icepop {thr} 0.8 1.25"),
        Row("openrlhf", f"--algo.advantage.is_correction_type tis {thr} <lo> <hi>", "tis", {"cap_low": "<lo>", "cap": "<hi>"},
            O + f"--algo.advantage.is_correction_type tis {thr} 0.5 5.0"),
        Row("nemo-rl", f"{nemo}_type seq-mask-tis, _ratio_min <lo>, _ratio <hi> (reference 0.999, 1.002)", "seq_mask_tis",
            {"cap_low": "<lo>", "cap": "<hi>"}, nm + "seq-mask-tis, _ratio_min 0.999, _ratio 1.002"),
        Row("nemo-rl", f"{nemo}_type icepop, _ratio_min <lo>, _ratio <hi>", "icepop", {"cap_low": "<lo>", "cap": "<hi>"},
            nm + "icepop, _ratio_min 0.8, _ratio 1.25"),
        Row("nemo-rl", f"{nemo}_type tis, _ratio_min <lo> (default 0), _ratio <hi>", "tis", {"cap_low": "<lo>", "cap": "<hi>"},
            nm + "tis, _ratio_min 0.9, _ratio 1.1"),
        Row("skyrl", f"{opc}.sequence_mask_metric geometric (geo_mask_low 0.99, geo_mask_high 1.01)", "geo_mask", {},
            S + f"{opc}: sequence_mask_metric=geometric"),
        Row("skyrl", f"{opc}.sequence_mask_metric product (0.5, 2.0)", "geo_mask", {"sequence_mask_metric": "product"},
            S + f"{opc}: sequence_mask_metric=product"),
        Row("skyrl", f"{opc}.outlier_token_is_threshold_low / _high", "geo_mask",
            {"sequence_mask_metric": None, "outlier_low": "<lo>", "outlier_high": "<hi>"},
            S + f"{opc}: outlier_token_is_threshold_high=1.5"),
        Row("skyrl", f"{opc}.token_mask_is_threshold_low / _high", "geo_mask",
            {"token_mask_low": "<lo>", "token_mask_high": "<hi>"},
            S + f"{opc}: sequence_mask_metric=geometric, token_mask_is_threshold_low=0.9, token_mask_is_threshold_high=1.1"),
        Row("skyrl", f"{opc}.tis_ratio_type token (token_tis_ratio_clip_high 2.0)", "geo_mask",
            {"sequence_mask_metric": None, "tis_ratio_type": "token"}, S + f"{opc}: tis_ratio_type=token", "= tis (cap 2)"),
        Row("skyrl", f"{opc}.tis_ratio_type sequence (sequence_tis_ratio_clip_high 5.0)", "geo_mask",
            {"sequence_mask_metric": None, "tis_ratio_type": "sequence"},
            S + f"{opc}: tis_ratio_type=sequence, sequence_tis_ratio_clip_high=1.05"),
        Row("trl", "vllm_importance_sampling_mode token_truncate", "tis", {"cap": 3.0},
            T + "vllm_importance_sampling_mode token_truncate (clip_max 3.0)", TRL_BOUNDS),
        Row("trl", "vllm_importance_sampling_mode token_mask", "mis", {"cap": 3.0},
            T + "vllm_importance_sampling_mode token_mask (clip_max 3.0)", TRL_BOUNDS),
        Row("trl", "vllm_importance_sampling_mode sequence_truncate", "tis_seq", {"cap": 3.0},
            T + "vllm_importance_sampling_mode sequence_truncate (clip_max 3.0)", f"{TRL_BOUNDS}; {TRL_SEQ}"),
        Row("trl", "vllm_importance_sampling_mode sequence_mask (TRL's default)", "mis_seq", {"cap": 3.0},
            T + "vllm_importance_sampling_mode sequence_mask (clip_max 3.0)", f"{TRL_BOUNDS}; {TRL_SEQ}"),
        Row("trl", "off_policy_mask_threshold δ (OPSM), vllm_importance_sampling_correction false", "opsm",
            {"threshold": "<δ>"}, T + "off_policy_mask_threshold 0.5 (vllm_importance_sampling_correction false)",
            "with the IS correction on (TRL's default under vLLM) TRL multiplies its IS weight in as well: "
            "no single estimator"),
        Row("areal", "actor.rejection_sampling {level: token, action: mask, metric: ratio, upper: 5.0}", "decoupled", {},
            AR + "rejection_sampling {level: token, action: mask, metric: ratio, upper: 5.0} as decoupled"),
        Row("areal", "actor.rejection_sampling {} (the config's defaults: token, mask, ratio, mean, upper 5.0)", "decoupled_rs",
            {}, AR + "rejection_sampling {}", "= decoupled (cap 5)"),
        Row("areal", "actor.rejection_sampling {level, action, metric, agg, upper, lower}; eps_clip_higher; c_clip",
            "decoupled_rs", {"level": "<level>", "action": "<action>", "metric": "<metric>", "agg": "<agg>",
                             "upper": "<upper>", "lower": "<lower>", "eps_high": "<eps_clip_higher>", "dual_clip": "<c_clip>"},
            AR + "rejection_sampling {level: sequence, agg: max, metric: kl_k3, upper: 0.01}" + ONE_PER_SETTING,
            "AReaL's kl_k1 is log r and kl_k3 is 1/r − 1 + log r (verl's: −log r and r − 1 − log r)"),
        Row("areal", "actor.rejection_sampling null", "naive", {}, AR + "rejection_sampling null",
            "eps_high = eps_clip_higher; AReaL's c_clip (a dual clip, off by default) has no naive counterpart"),
        Row("areal", "actor.prox_logp_method loglinear (A-3PO)", None, {}, PROX,
            "a trainer option (how π_prox is obtained), not an estimator", setting="train.prox_logp: loglinear"),
        Row("areal", "the linear approximation of actor.prox_logp_method metrics", None, {}, PROX,
            "AReaL logs it as a metric only; here it can also train", setting="train.prox_logp: linear"),
        Row("prime-rl", "loss.type default (default_loss_fn: DPPO-Binary TV + KL)", "dppo", {},
            "golden: prime_rl_loss.json#loss.type default", "adv_tau fixed at 1"),
        Row("prime-rl", "loss.type ipo (ipo_loss_fn)", "ipo", {}, "golden: prime_rl_loss.json#loss.type ipo", "adv_tau fixed at 1"),
    ]


ROWS: tuple[Row, ...] = tuple(_verl() + _others())


def rows(framework: str) -> list[Row]:
    """The rows of `framework` (one of FRAMEWORKS); ValueError naming the valid ones otherwise."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; valid: {', '.join(FRAMEWORKS)}")
    return [r for r in ROWS if r.framework == framework]


def _params(r: Row) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.params.items()) or "defaults"


def describe(framework: str) -> str:
    """The text `stalebench estimators --from FRAMEWORK` prints: one block per option."""
    out = []
    for r in rows(framework):
        target = f"{r.estimator} ({_params(r)})" if r.estimator else r.setting or "not in stalebench"
        out.append(f"{r.option}\n  -> {target}" + (f"\n  backed by: {r.backed_by}" if r.backed_by else "")
                   + (f"\n  note: {r.note}" if r.note else ""))
    return "\n".join(out)


def markdown() -> str:
    """docs/framework-map.md: every row, one table per framework."""
    lines = ["# From a framework's option to a stalebench estimator", "",
             "Generated by `python -m algorithms.framework_map` from `algorithms/framework_map.py` (do not edit by hand;",
             "a test checks that this page is current). The same rows: `stalebench estimators --from FRAMEWORK`.",
             "What backs a row: **golden**, the framework's own functions run on a fixed batch give the estimator's loss and",
             "gradient to 1e-6 (`tests/test_algorithms_golden.py`, data in `tests/data/golden/`); **coincidence**, equal",
             "gradients on the coincidence probes to an estimator with a golden row.", ""]
    for fw in FRAMEWORKS:
        lines += [f"## {fw}", "", "| option | estimator | parameters | backed by | note |", "|---|---|---|---|---|"]
        for r in rows(fw):
            cells = [r.option, f"`{r.estimator}`" if r.estimator else "—", _params(r) if r.estimator else
                     (f"`{r.setting}`" if r.setting else ""),
                     r.backed_by, r.note]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")

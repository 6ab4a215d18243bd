"""Diagnosis: which steps of the checkpoint's pipeline a candidate does differently, and how.

The catalogue (`catalogue`) names step families, each with the variants engines use
(`kimi_oracle.pipelines.variants`); `attribution.attribute` searches stacks of variants for one
that reproduces the candidate's output (`search`), measured in levels (`levels`); `findings`
gives every finding its diagnosis fields; `profile` infers a candidate's pipeline from a run's
findings. The rule is documented in docs/diagnosis.md.

Magnitudes are in levels: one level is one step of the 8-bit input (`checks.levels_of`).
"""

from __future__ import annotations

from kimi_oracle.core.explanation import EXPLAINED, EXPLANATIONS, PARTLY_EXPLAINED
from kimi_oracle.oracle.diagnosis.attribution import Attribution, attribute, diagnosis_holds
from kimi_oracle.oracle.diagnosis.catalogue import (_BY_ID, ALL_MODES, BY_ELIMINATION, BY_ID, CATALOGUE,
                                                    CONVERTED_FIRST, MEANINGS, ROOT_CAUSE_IDS, UNEXPLAINED, RootCause,
                                                    Variant, assumed_steps, full_name, meaning, parse_assumption,
                                                    steps_for)
from kimi_oracle.oracle.diagnosis.findings import FINDING_MAX_RUNS, finding_diagnosis
from kimi_oracle.oracle.diagnosis.levels import LevelSummary, level_summary
from kimi_oracle.oracle.diagnosis.profile import EngineProfile, infer_profile
from kimi_oracle.oracle.diagnosis.search import (BEAM, KEEP_AT_MOST, MAX_STACK, PAIR_SEEDS, RESTARTS, STACK_RUNS,
                                                 Explained)

__all__ = [
    "ALL_MODES",
    "diagnosis_holds",
    "BEAM",
    "BY_ELIMINATION",
    "BY_ID",
    "CATALOGUE",
    "CONVERTED_FIRST",
    "EXPLAINED",
    "EXPLANATIONS",
    "FINDING_MAX_RUNS",
    "KEEP_AT_MOST",
    "MAX_STACK",
    "MEANINGS",
    "PAIR_SEEDS",
    "PARTLY_EXPLAINED",
    "RESTARTS",
    "STACK_RUNS",
    "ROOT_CAUSE_IDS",
    "UNEXPLAINED",
    "Attribution",
    "EngineProfile",
    "Explained",
    "LevelSummary",
    "RootCause",
    "Variant",
    "assumed_steps",
    "attribute",
    "finding_diagnosis",
    "full_name",
    "infer_profile",
    "level_summary",
    "meaning",
    "parse_assumption",
    "steps_for",
]

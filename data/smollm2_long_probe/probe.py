"""Cheap probe for issue 74: which long-answer task has SmolLM2-135M-Instruct write >= 64 tokens with a score that
has room to rise, FP32, 32 problems x 8 samples, temperature 1.0, at most MAX_TOKENS tokens.

Not part of nbkit: the record of how ``probe.jsonl`` was measured (README.md). Run from the project root:
``.venv/bin/python data/smollm2_long_probe/probe.py FAMILIES OUT.jsonl`` (comma-separated families).

Each family is a list-writing task with a continuous score: the fraction of the K positions of the answer list that
hold the right number (a missing or extra item scores 0 at its place), so a reward can rise by degrees.
"""

import json
import random
import re
import sys
import time

K = 16
MAX_TOKENS = 160
SYSTEM = "Answer with the list only, numbers separated by commas."


def family(name: str, seed: int = 0, n: int = 32) -> list[tuple[str, list[int]]]:
    """``n`` seeded problems of ``name``: (question, the K numbers of the right answer)."""
    rng = random.Random(seed)
    out: dict[str, list[int]] = {}
    while len(out) < n:
        if name == "count_up":
            a = rng.randint(100, 980)
            out[f"Count up from {a}: write the next {K} numbers."] = [a + i for i in range(1, K + 1)]
        elif name == "count_down":
            a = rng.randint(120, 999)
            out[f"Count down from {a}: write the next {K} numbers."] = [a - i for i in range(1, K + 1)]
        elif name == "count_by2":
            a = 2 * rng.randint(50, 480)
            out[f"Count up by twos from {a}: write the next {K} numbers."] = [a + 2 * i for i in range(1, K + 1)]
        elif name == "count_by5":
            a = 5 * rng.randint(20, 180)
            out[f"Count up by fives from {a}: write the next {K} numbers."] = [a + 5 * i for i in range(1, K + 1)]
        elif name == "table":
            k = rng.randint(3, 49)
            out[f"Write the first {K} multiples of {k}."] = [k * i for i in range(1, K + 1)]
        else:
            raise ValueError(f"unknown family {name!r}; families: {FAMILIES}")
    return sorted(out.items())


FAMILIES = ("count_up", "count_down", "count_by2", "count_by5", "table")
EXAMPLES = {
    "count_up": ("Count up from 37: write the next 16 numbers.", list(range(38, 54))),
    "count_down": ("Count down from 61: write the next 16 numbers.", list(range(60, 44, -1))),
    "count_by2": ("Count up by twos from 14: write the next 16 numbers.", list(range(16, 48, 2))),
    "count_by5": ("Count up by fives from 25: write the next 16 numbers.", list(range(30, 110, 5))),
    "table": ("Write the first 16 multiples of 2.", list(range(2, 34, 2))),
}


def prompt(name: str, question: str) -> str:
    """ChatML with the family's one example turn (its numbers are never asked)."""
    q, a = EXAMPLES[name]
    turns = [("system", SYSTEM), ("user", q), ("assistant", ", ".join(map(str, a))), ("user", question)]
    return "".join(f"<|im_start|>{r}\n{t}<|im_end|>\n" for r, t in turns) + "<|im_start|>assistant\n"


def score(text: str, want: list[int]) -> float:
    """Fraction of the K places holding the right number (the response's integers, in order). Every response is
    kept in the record (``responses_text``: problem index, tokens, text), so another score can be computed from it."""
    got = [int(x) for x in re.findall(r"-?\d+", text)][: len(want)]
    return sum(g == w for g, w in zip(got, want)) / len(want)


def step_score(text: str, want: list[int]) -> float:
    """Fraction of the K places whose number follows the one before it by the task's step (the first place: the
    question's own number, ``want[0] - step``): the counting, apart from where the list starts."""
    step = want[1] - want[0]
    got = [int(x) for x in re.findall(r"-?\d+", text)][: len(want)]
    prev = [want[0] - step, *got[:-1]]
    return sum(g - p == step for g, p in zip(got, prev)) / len(want)


def summary(path: str) -> None:
    """The README's table from a probe record: both scores recomputed from every stored response."""
    print(
        "| family | mean tokens | truncated | place score | step score | all 16 right | problems in [0.2, 0.8] (step) |"
    )
    print("|---|---|---|---|---|---|---|")
    for line in open(path):
        rec = json.loads(line)
        problems = family(rec["family"])
        place = [score(t, problems[i][1]) for i, _, t in rec["responses_text"]]
        steps = [step_score(t, problems[i][1]) for i, _, t in rec["responses_text"]]
        per = [[] for _ in problems]
        for (i, _, _), v in zip(rec["responses_text"], steps):
            per[i].append(v)
        window = sum(0.2 <= sum(v) / len(v) <= 0.8 for v in per) / len(per)
        print(
            f"| {rec['family']} | {rec['mean_tokens']} | {rec['truncated']}/{rec['responses']} | "
            f"{sum(place) / len(place):.3f} | {sum(steps) / len(steps):.3f} | {rec['all_right']:.3f} | {window:.2f} |"
        )


def main() -> None:
    if sys.argv[1] == "--summary":
        return summary(sys.argv[2])
    from nbkit.engines import SamplingConfig, make_engine

    names, out_path = sys.argv[1].split(","), sys.argv[2]
    t0 = time.time()
    engine = make_engine("hf", "smollm2-135m", "fp32", batch_size=256, progress=False)
    print("startup", round(time.time() - t0, 1), flush=True)
    for name in names:
        problems = family(name)
        t1 = time.time()
        rs = engine.generate([prompt(name, q) for q, _ in problems], SamplingConfig(max_tokens=MAX_TOKENS, n=8, seed=0))
        per: list[list[float]] = [[] for _ in problems]
        for r in rs:
            per[r.prompt_index].append(score(r.text, problems[r.prompt_index][1]))
        means = [sum(s) / len(s) for s in per]
        lengths = [len(r.token_ids) for r in rs]
        rec = dict(
            family=name,
            engine="hf",
            dtype="fp32",
            n_problems=len(problems),
            n_samples=8,
            max_tokens=MAX_TOKENS,
            mean_score=round(sum(means) / len(means), 3),
            all_right=round(sum(s == 1.0 for p in per for s in p) / len(rs), 3),
            problems_in_window=round(sum(0.2 <= m <= 0.8 for m in means) / len(means), 3),
            mean_tokens=round(sum(lengths) / len(lengths), 1),
            min_tokens=min(lengths),
            max_tokens_seen=max(lengths),
            truncated=sum(r.finish_reason == "length" for r in rs),
            responses=len(rs),
            seconds=round(time.time() - t1, 1),
            responses_text=[[r.prompt_index, len(r.token_ids), r.text] for r in rs],
        )
        print(json.dumps({k: v for k, v in rec.items() if k != "responses_text"}), flush=True)
        with open(out_path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()

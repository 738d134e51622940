"""Cheap probe: SmolLM2-135M-Instruct pass rates per (family, answer format), fp32, 30 problems x 8 samples.

Not part of nbkit: the record of how ``probe.jsonl`` was measured (README.md). Run from the project root:
``/work/hrun python data/smollm2_task_probe/probe.py FAMILIES FORMATS OUT.jsonl ENGINE`` (comma-separated families
and formats; ENGINE ``hf`` or ``vllm``).
"""

import json
import random
import sys
import time

from nbkit.tasks.graders import GRADERS

NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia"]
THINGS = ["apples", "books", "pens", "cards", "balls", "stickers"]
WORDS = ["cat", "dog", "sun", "tree", "book", "fish", "cup", "hat", "car", "bird", "shoe", "door"]


def fam(name, seed=0, n=30):
    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        if name == "add11":
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            out.add((f"What is {a} plus {b}?", a + b))
        elif name == "add21":
            a, b = rng.randint(10, 99), rng.randint(1, 9)
            out.add((f"What is {a} plus {b}?", a + b))
        elif name == "sub21":
            a, b = rng.randint(10, 99), rng.randint(1, 9)
            out.add((f"What is {a} minus {b}?", a - b))
        elif name == "mul11":
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            out.add((f"What is {a} times {b}?", a * b))
        elif name == "muladd":
            a, b, c = (rng.randint(1, 9) for _ in range(3))
            out.add((f"What is {a} times {b} plus {c}?", a * b + c))
        elif name == "succ":
            a = rng.randint(10, 98)
            out.add((f"What number comes after {a}?", a + 1))
        elif name == "succ3":
            a = rng.randint(100, 999)
            out.add((f"What number comes after {a}?", a + 1))
        elif name == "pred":
            a = rng.randint(11, 99)
            out.add((f"What number comes before {a}?", a - 1))
        elif name == "seq":
            a, d = rng.randint(1, 20), rng.randint(1, 9)
            terms = ", ".join(str(a + d * i) for i in range(4))
            out.add((f"What number comes next: {terms}?", a + 4 * d))
        elif name == "add10":
            a = rng.randint(10, 89)
            out.add((f"What is {a} plus 10?", a + 10))
        elif name == "count":
            k = rng.randint(2, 9)
            ws = [rng.choice(WORDS) for _ in range(k)]
            out.add((f"How many words are in this list: {', '.join(ws)}?", k))
        elif name == "story":
            who, what = rng.choice(NAMES), rng.choice(THINGS)
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            if rng.random() < 0.5:
                out.add((f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?", a + b))
            else:
                a, b = max(a, b), min(a, b)
                out.add((f"{who} has {a} {what} and gives away {b}. How many {what} does {who} have now?", a - b))
    return sorted(out)


EXAMPLES = {
    "add11": [("What is 3 plus 4?", 7), ("What is 6 plus 8?", 14)],
    "add21": [("What is 23 plus 4?", 27), ("What is 58 plus 7?", 65)],
    "sub21": [("What is 23 minus 4?", 19), ("What is 58 minus 7?", 51)],
    "mul11": [("What is 3 times 4?", 12), ("What is 6 times 8?", 48)],
    "muladd": [("What is 3 times 4 plus 2?", 14), ("What is 6 times 8 plus 5?", 53)],
    "succ": [("What number comes after 23?", 24), ("What number comes after 59?", 60)],
    "succ3": [
        ("What number comes after 23?", 24),
        ("What number comes after 59?", 60),
        ("What number comes after 347?", 348),
        ("What number comes after 699?", 700),
    ],
    "pred": [("What number comes before 23?", 22), ("What number comes before 60?", 59)],
    "seq": [("What number comes next: 2, 4, 6, 8?", 10), ("What number comes next: 5, 8, 11, 14?", 17)],
    "add10": [("What is 23 plus 10?", 33), ("What is 58 plus 10?", 68)],
    "count": [
        ("How many words are in this list: pen, cup, cat?", 3),
        ("How many words are in this list: sun, sun, box, hat, pen?", 5),
    ],
    "story": [
        ("Max has 4 coins and gets 3 more. How many coins does Max have now?", 7),
        ("Eva has 9 coins and gives away 5. How many coins does Eva have now?", 4),
    ],
}
GENERIC = [("What is 12 plus 7?", 19)]


def chat(system, shots, q):
    s = f"<|im_start|>system\n{system}<|im_end|>\n"
    for u, a in shots:
        s += f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n"
    return s + f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


BOX_SYS = "Give only the final answer, as a number within \\boxed{}."
NUM_SYS = "Answer with the number only."
FORMATS = {
    "boxed-1shot-generic": (lambda f, q: chat(BOX_SYS, [(u, f"\\boxed{{{a}}}") for u, a in GENERIC], q), "boxed_int"),
    "number-1shot-family": (lambda f, q: chat(NUM_SYS, [(u, str(a)) for u, a in EXAMPLES[f][:1]], q), "first_int"),
    "number-2shot-family": (lambda f, q: chat(NUM_SYS, [(u, str(a)) for u, a in EXAMPLES[f][:2]], q), "first_int"),
    "number-4shot-family": (lambda f, q: chat(NUM_SYS, [(u, str(a)) for u, a in EXAMPLES[f][:4]], q), "first_int"),
    "boxed-2shot-family": (
        lambda f, q: chat(BOX_SYS, [(u, f"\\boxed{{{a}}}") for u, a in EXAMPLES[f]], q),
        "boxed_int",
    ),
}


def main():
    from nbkit.engines import SamplingConfig, make_engine

    fams = sys.argv[1].split(",")
    fmts = sys.argv[2].split(",")
    out_path = sys.argv[3]
    t0 = time.time()
    eng = make_engine(
        sys.argv[4],
        "smollm2-135m",
        "fp32",
        **(
            {"batch_size": 240, "progress": False}
            if sys.argv[4] == "hf"
            else {"seed": 0, "progress": False, "max_model_len": 512, "max_num_batched_tokens": 65536}
        ),
    )
    print("startup", round(time.time() - t0, 1), flush=True)
    for f in fams:
        probs = fam(f)
        for fmt in fmts:
            build, grader = FORMATS[fmt]
            g = GRADERS[grader]
            t1 = time.time()
            rs = eng.generate(
                [build(f, q) for q, _ in probs], SamplingConfig(max_tokens=16, n=8, seed=0, seeding="request")
            )
            per = [0] * len(probs)
            noans = 0
            trunc = 0
            for r in rs:
                ok = g.correct(r.text, str(probs[r.prompt_index][1]))
                per[r.prompt_index] += ok
                noans += g.extract(r.text) is None
                trunc += r.finish_reason == "length"
            rates = [c / 8 for c in per]
            rec = dict(
                engine=sys.argv[4],
                family=f,
                format=fmt,
                grader=grader,
                n_problems=len(probs),
                n_samples=8,
                mean=round(sum(rates) / len(rates), 3),
                in_window=round(sum(0.2 - 1e-9 <= x <= 0.8 + 1e-9 for x in rates) / len(rates), 3),
                zero=sum(x == 0 for x in rates),
                one=sum(x == 1 for x in rates),
                no_answer=noans,
                truncated=trunc,
                responses=len(rs),
                seconds=round(time.time() - t1, 1),
                examples=[r.text for r in rs[:16:2]],
            )
            print(json.dumps({k: v for k, v in rec.items() if k != "examples"}), flush=True)
            with open(out_path, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()

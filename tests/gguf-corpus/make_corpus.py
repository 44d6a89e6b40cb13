#!/usr/bin/env python3
"""Writes the GGUF regression corpus replayed by tests/gguf_corpus.rs.

`ok-*.gguf` must load (header, tensors, tokenizer when present); `bad-*.gguf` must be refused
with an error by at least one of those steps, without a panic. Run from this directory:
`python3 make_corpus.py`. Only the standard library is used; files are tiny.
"""
import struct

ALIGN = 32


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack('<Q', len(b)) + b


def kv(key, ty, payload):
    return s(key) + struct.pack('<I', ty) + payload


def u32(key, v):
    return kv(key, 4, struct.pack('<I', v))


def string(key, v):
    return kv(key, 8, s(v))


def str_array(key, items):
    return kv(key, 9, struct.pack('<IQ', 8, len(items)) + b''.join(s(i) for i in items))


def f32_array(key, items):
    return kv(key, 9, struct.pack('<IQ', 6, len(items)) + b''.join(struct.pack('<f', i) for i in items))


def i32_array(key, items):
    return kv(key, 9, struct.pack('<IQ', 5, len(items)) + b''.join(struct.pack('<i', i) for i in items))


def tinfo(name, dims, ty, off, ndims=None):
    return (s(name) + struct.pack('<I', len(dims) if ndims is None else ndims)
            + b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', ty, off))


def pad(b, a=ALIGN):
    return b + b'\0' * ((-len(b)) % a)


def pq2_block(seed):
    # d = 1.0 (0x3c00) and a pattern of codes 0..3.
    return struct.pack('<H', 0x3c00) + bytes(((seed * 7 + i * 13) & 0xff) for i in range(32))


def gguf(kvs, tensors, data, version=3, magic=b'GGUF', n_tensors=None, n_kv=None):
    head = magic + struct.pack('<IQQ', version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b''.join(kvs) + b''.join(tensors)
    return pad(head) + data if tensors else head


VOCAB = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + \
    ['\u2581', 'a', 'b', '\u2581a', 'ab', '\u2581ab', 'c', '<|x|>']
TYPES = [2, 3, 3] + [6] * 256 + [1] * 7 + [4]
TOK = [string('tokenizer.ggml.model', 'llama'), str_array('tokenizer.ggml.tokens', VOCAB),
       f32_array('tokenizer.ggml.scores', [0.0] * 259 + [-1, -2, -3, -1.5, -1, -0.5, -4, 0]),
       i32_array('tokenizer.ggml.token_type', TYPES), u32('tokenizer.ggml.bos_token_id', 1),
       u32('tokenizer.ggml.eos_token_id', 2)]
BASE_KV = [string('general.architecture', 'llama'), u32('llama.block_count', 1)] + TOK

# Tensors: f32 [4], pq2_0 [256, 4] (T2P), q8_0 [32, 2], f16 [8], bf16 [8].
F32 = struct.pack('<4f', 1, 2, 3, 4)
PQ2 = b''.join(pq2_block(i) for i in range(8))          # 8 blocks = 4 rows x 2 blocks
Q80 = b''.join(struct.pack('<H', 0x3800) + bytes(range(i, i + 32)) for i in range(2))
F16 = struct.pack('<8H', *([0x3c00] * 8))
BF16 = struct.pack('<8H', *([0x3f80] * 8))


def layout(parts):
    """[(name, dims, type, bytes)] -> (tensor infos, data) with aligned offsets."""
    infos, data = [], b''
    for name, dims, ty, payload in parts:
        data = pad(data)
        infos.append(tinfo(name, dims, ty, len(data)))
        data += payload
    return infos, data


GOOD = [('a.f32', [4], 0, F32), ('b.pq2_0', [256, 4], 142, PQ2), ('c.q8_0', [32, 2], 8, Q80),
        ('d.f16', [8], 1, F16), ('e.bf16', [8], 30, BF16)]
infos, data = layout(GOOD)
files = {}
files['ok-minimal.gguf'] = gguf(BASE_KV, infos, data)
files['ok-v2.gguf'] = gguf(BASE_KV, infos, data, version=2)
files['ok-vocab-only.gguf'] = gguf(BASE_KV, [], b'')
# general.alignment = 64: the data section and every tensor offset on 64-byte boundaries.
a64_head = (b'GGUF' + struct.pack('<IQQ', 3, 2, len(BASE_KV) + 1) + b''.join(BASE_KV)
            + u32('general.alignment', 64) + tinfo('a.f32', [4], 0, 0) + tinfo('b.pq2_0', [256, 4], 142, 64))
files['ok-alignment-64.gguf'] = pad(a64_head, 64) + pad(F32, 64) + PQ2
li, ld = layout([('legacy.q2_0', [256, 4], 42, PQ2)])
files['ok-legacy-q2_0-g128.gguf'] = gguf(BASE_KV, li, ld)

files['bad-magic.gguf'] = gguf(BASE_KV, infos, data, magic=b'GGML')
files['bad-version-1.gguf'] = gguf(BASE_KV, infos, data, version=1)
files['bad-version-bigendian.gguf'] = gguf(BASE_KV, infos, data, version=0x03000000)
files['bad-empty.gguf'] = b''
files['bad-truncated-header.gguf'] = files['ok-minimal.gguf'][:300]
files['bad-truncated-data.gguf'] = files['ok-minimal.gguf'][:-5]
files['bad-huge-kv-count.gguf'] = gguf(BASE_KV, infos, data, n_kv=1 << 60)
files['bad-huge-tensor-count.gguf'] = gguf(BASE_KV, infos, data, n_tensors=(1 << 64) - 1)
files['bad-kv-count-plus-one.gguf'] = gguf(BASE_KV, infos, data, n_kv=len(BASE_KV) + 1)
files['bad-huge-string-len.gguf'] = gguf([kv('general.name', 8, struct.pack('<Q', 1 << 40) + b'x')] + BASE_KV, infos, data)
files['bad-huge-array-len.gguf'] = gguf([kv('x.arr', 9, struct.pack('<IQ', 8, (1 << 64) - 1))] + BASE_KV, infos, data)
nested = struct.pack('<I', 0) + struct.pack('<Q', 0)
for _ in range(12):
    nested = struct.pack('<IQ', 9, 1) + nested
files['bad-nested-arrays.gguf'] = gguf([kv('x.nested', 9, nested)] + BASE_KV, infos, data)
files['bad-value-type.gguf'] = gguf([kv('x.bad', 13, b'\0' * 8)] + BASE_KV, infos, data)
files['bad-array-elem-type.gguf'] = gguf([kv('x.bad', 9, struct.pack('<IQ', 99, 1) + b'\0' * 8)] + BASE_KV, infos, data)
for name, payload, ty in [('zero', 0, 4), ('three', 3, 4), ('huge', 1 << 30, 4), ('u64', 32, 10)]:
    val = struct.pack('<Q' if ty == 10 else '<I', payload)
    files[f'bad-alignment-{name}.gguf'] = gguf([kv('general.alignment', ty, val)] + BASE_KV, infos, data)
files['bad-duplicate-key.gguf'] = gguf([u32('llama.block_count', 2)] + BASE_KV, infos, data)
files['bad-utf8-key.gguf'] = gguf([kv(b'\xff\xfe', 4, struct.pack('<I', 1))] + BASE_KV, infos, data)


def with_tensors(parts, **kw):
    i, d = layout(parts)
    return gguf(BASE_KV, i, d, **kw)


files['bad-tensor-type-77.gguf'] = with_tensors([('a', [4], 77, F32)])
files['ok-q4_K.gguf'] = with_tensors([('a', [256], 12, b'\0' * 144)])
# Below 2048 weights the two id-42 layouts pad to the same size and pq2_0 is assumed.
files['ok-q2_0-g64.gguf'] = with_tensors([('legacy.g64', [2048, 4], 42, b'\0' * (8192 // 64 * 18))])
files['bad-q2_0-odd-size.gguf'] = with_tensors([('legacy.odd', [256, 4], 42, b'\0' * 100)])
files['bad-block-multiple.gguf'] = with_tensors([('a', [100, 4], 142, PQ2)])
files['bad-dim-overflow.gguf'] = with_tensors([('a', [1 << 32, 1 << 32], 0, F32)])
files['bad-dim-huge.gguf'] = with_tensors([('a', [1 << 40], 0, F32)])
files['bad-duplicate-tensor.gguf'] = with_tensors([('a', [4], 0, F32), ('a', [4], 0, F32)])
files['bad-n-dims-zero.gguf'] = gguf(BASE_KV, [tinfo('a', [], 0, 0)], F32)
files['bad-n-dims-5.gguf'] = gguf(BASE_KV, [tinfo('a', [1, 1, 1, 1, 4], 0, 0)], F32)
files['bad-n-dims-huge.gguf'] = gguf(BASE_KV, [tinfo('a', [4], 0, 0, ndims=0xFFFFFFFF)], F32)
files['bad-offset-unaligned.gguf'] = gguf(BASE_KV, [tinfo('a', [4], 0, 4)], F32 + F32)
files['bad-offset-past-end.gguf'] = gguf(BASE_KV, [tinfo('a', [4], 0, 1 << 20)], F32)
files['bad-offset-max.gguf'] = gguf(BASE_KV, [tinfo('a', [4], 0, (1 << 64) - 32)], F32)
files['bad-overlap.gguf'] = gguf(BASE_KV, [tinfo('a', [8], 0, 0), tinfo('b', [8], 0, 0)], F32 * 2)
files['bad-tokenizer-scores-len.gguf'] = gguf(
    [string('tokenizer.ggml.model', 'llama'), str_array('tokenizer.ggml.tokens', VOCAB),
     f32_array('tokenizer.ggml.scores', [0.0] * 3)], [], b'')
files['bad-tokenizer-model.gguf'] = gguf([string('tokenizer.ggml.model', 'rwkv'),
                                          str_array('tokenizer.ggml.tokens', VOCAB)], [], b'')
files['bad-tokenizer-no-tokens.gguf'] = gguf([string('tokenizer.ggml.model', 'gpt2'),
                                              str_array('tokenizer.ggml.tokens', [])], [], b'')
files['bad-tokenizer-bpe-no-merges.gguf'] = gguf([string('tokenizer.ggml.model', 'gpt2'),
                                                  str_array('tokenizer.ggml.tokens', ['a', 'b'])], [], b'')
files['bad-tokenizer-unknown-pre.gguf'] = gguf([string('tokenizer.ggml.model', 'gpt2'),
                                                 string('tokenizer.ggml.pre', 'no-such-pre'),
                                                 str_array('tokenizer.ggml.tokens', ['a', 'b']),
                                                 str_array('tokenizer.ggml.merges', ['a b'])], [], b'')
files['ok-tokenizer-bpe.gguf'] = gguf([string('tokenizer.ggml.model', 'gpt2'),
                                       string('tokenizer.ggml.pre', 'qwen2'),
                                       str_array('tokenizer.ggml.tokens', ['a', 'b', 'ab', '\u0120', '\u0120ab', 'c', '\u00c3', '\u00a9']),
                                       str_array('tokenizer.ggml.merges', ['a b', '\u0120 ab'])], [], b'')

for name, b in sorted(files.items()):
    with open(name, 'wb') as f:
        f.write(b)
print(len(files), 'files')

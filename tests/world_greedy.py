"""tests/world_greedy.py — the RWKV World tokenizer's rule written plainly in
Python, as an independent reference for lind's C encoder
(recurrent/tokenizer_world.c): at each position the longest token whose
bytes match, over a dict trie. Used by tests/test_tokenizer_world.py (the
genuine vocabulary) and tests/test_tokenizer_npm.py (GPT-2's tokens written
as a World file)."""


def greedy_encoder(toks):
    """toks: {id: bytes}. Returns encode(data: bytes) -> [ids]."""
    trie = {}
    for i, b in toks.items():
        node = trie
        for c in b:
            node = node.setdefault(c, {})
        node[None] = i

    def encode(data):
        out, q = [], 0
        while q < len(data):
            node, best, blen, k = trie, None, 0, 0
            while q + k < len(data) and data[q + k] in node:
                node = node[data[q + k]]
                k += 1
                if None in node:
                    best, blen = node[None], k
            out.append(best)
            q += blen
        return out
    return encode

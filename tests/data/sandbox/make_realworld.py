"""Writes realworld.jsonl: third-party-style programs (CRUXEval/MBPP flavour) with inputs.

Run once to regenerate; the test computes expected outputs by running each program
in-process (they are benign) and requires the sandbox to agree exactly.
"""
import json
from pathlib import Path

P = []
def add(src, *inputs):
    P.append({"program": src.strip("\n") + "\n", "inputs": list(inputs)})

add('''
def f(text):
    return text.title().swapcase()
''', "'hello World foo'", "''")
add('''
def f(nums):
    out = []
    for i, n in enumerate(nums):
        if i % 2 == 0:
            out.append(n * 2)
        else:
            out.insert(0, n)
    return out
''', "[1, 2, 3, 4, 5]", "[]")
add('''
def f(d, key):
    d = dict(d)
    value = d.pop(key, None)
    return (value, sorted(d.items()))
''', "{'a': 1, 'b': 2, 'c': 3}, 'b'", "{'x': 0}, 'y'")
add('''
def f(s):
    vowels = set('aeiou')
    return ''.join(ch for ch in s if ch.lower() not in vowels)
''', "'Programming Language'")
add('''
def f(matrix):
    return [list(row) for row in zip(*matrix)]
''', "[[1, 2, 3], [4, 5, 6]]")
add('''
def f(words):
    groups = {}
    for w in words:
        key = ''.join(sorted(w))
        groups.setdefault(key, []).append(w)
    return sorted(sorted(g) for g in groups.values())
''', "['eat', 'tea', 'tan', 'ate', 'nat', 'bat']")
add('''
def f(n):
    a, b = 0, 1
    seq = []
    while len(seq) < n:
        seq.append(a)
        a, b = b, a + b
    return seq
''', "12", "0")
add('''
def f(s, sep):
    parts = s.split(sep)
    return sep.join(p.strip() for p in reversed(parts) if p.strip())
''', "' a , b,, c ', ','")
add('''
def f(nums, target):
    seen = {}
    for i, n in enumerate(nums):
        if target - n in seen:
            return (seen[target - n], i)
        seen[n] = i
    return (-1, -1)
''', "[2, 7, 11, 15], 9", "[1, 2], 10")
add('''
def f(text):
    counts = {}
    for word in text.lower().split():
        word = word.strip('.,!?')
        counts[word] = counts.get(word, 0) + 1
    return max(sorted(counts), key=counts.get)
''', "'The cat and the hat. The end!'")
add('''
def f(lst):
    return lst[::2] + lst[1::2][::-1]
''', "[0, 1, 2, 3, 4, 5, 6]", "'abcdef'")
add('''
def f(s):
    stack = []
    pairs = {')': '(', ']': '[', '}': '{'}
    for ch in s:
        if ch in '([{':
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack
''', "'{[()()]}'", "'([)]'", "''")
add('''
def f(n):
    return [i for i in range(2, n) if all(i % d for d in range(2, int(i ** 0.5) + 1))]
''', "30")
add('''
def f(a, b):
    return sorted(set(a) & set(b)), sorted(set(a) ^ set(b))
''', "[1, 2, 3, 4], [3, 4, 5]")
add('''
def f(s):
    result = ''
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        result += s[i] + str(j - i)
        i = j
    return result
''', "'aaabccdddd'", "'x'")
add('''
def f(items):
    return {k: v for k, v in items if v is not None}
''', "[('a', 1), ('b', None), ('c', 0)]")
add('''
def f(nested):
    flat = []
    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        else:
            flat.append(x)
    walk(nested)
    return flat
''', "[1, [2, [3, [4]], 5], [[6]]]")
add('''
def f(text, width):
    lines, line = [], ''
    for word in text.split():
        if len(line) + len(word) + (1 if line else 0) > width:
            lines.append(line)
            line = word
        else:
            line = (line + ' ' + word) if line else word
    if line:
        lines.append(line)
    return lines
''', "'the quick brown fox jumps over the lazy dog', 10")
add('''
def f(t):
    return tuple(x for x in t if x) + (len(t),)
''', "(0, 1, '', 'a', None, [], [2])")
add('''
def f(s):
    return s.replace('a', '4').replace('e', '3').upper().center(15, '*')
''', "'leet speak'")
add('''
def f(nums):
    nums = sorted(nums)
    n = len(nums)
    mid = n // 2
    return nums[mid] if n % 2 else (nums[mid - 1] + nums[mid]) / 2
''', "[5, 3, 1, 4]", "[7]")
add('''
def f(d):
    inverted = {}
    for k, v in d.items():
        inverted.setdefault(v, []).append(k)
    return inverted
''', "{'a': 1, 'b': 2, 'c': 1}")
add('''
def f(s):
    return [s[i:j] for i in range(len(s)) for j in range(i + 1, len(s) + 1) if s[i:j] == s[i:j][::-1] and j - i > 1]
''', "'abacdc'")
add('''
from collections import Counter

def f(s):
    c = Counter(s)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
''', "'mississippi'")
add('''
from collections import defaultdict, deque

def f(edges, start):
    graph = defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
        graph[b].append(a)
    seen, order, queue = {start}, [], deque([start])
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return order
''', "[(1, 2), (1, 3), (2, 4), (3, 4), (4, 5)], 1")
add('''
import itertools

def f(xs, r):
    return [sum(c) for c in itertools.combinations(xs, r)]
''', "[1, 2, 3, 4], 2")
add('''
import math

def f(points):
    return round(max(math.hypot(x, y) for x, y in points), 6)
''', "[(3, 4), (1, 1), (-6, 8)]")
add('''
from functools import reduce

def f(nums):
    return reduce(lambda acc, x: acc * 10 + x, nums, 0)
''', "[1, 2, 3, 0]")
add('''
import re

def f(text):
    return re.findall(r'[A-Z][a-z]+', text), re.sub(r'\\d+', '#', text)
''', "'Alice met Bob at 10 and Carol at 1130'")
add('''
import heapq

def f(nums, k):
    return heapq.nlargest(k, nums), heapq.nsmallest(k, nums)
''', "[5, 1, 9, 3, 7, 2], 3")
add('''
from bisect import bisect_left, insort

def f(xs):
    out = []
    for x in xs:
        insort(out, x)
    return out, bisect_left(out, 4)
''', "[5, 2, 8, 4, 1]")
add('''
class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        return self.items.pop() if self.items else None

def f(ops):
    s = Stack()
    out = []
    for op in ops:
        if op == 'pop':
            out.append(s.pop())
        else:
            s.push(op)
    return out
''', "[1, 2, 'pop', 3, 'pop', 'pop', 'pop']")
add('''
def f(s):
    words = s.split()
    return ' '.join(w[::-1] if len(w) > 3 else w for w in words)
''', "'this is a simple sentence'")
add('''
def f(n):
    digits = []
    while n:
        n, r = divmod(n, 2)
        digits.append(str(r))
    return ''.join(reversed(digits)) or '0'
''', "37", "0")
add('''
def f(grid):
    rows, cols = len(grid), len(grid[0])
    count = 0
    for r in range(rows):
        for c in range(cols):
            if grid[r][c] == 1 and (r == 0 or grid[r - 1][c] == 0) and (c == 0 or grid[r][c - 1] == 0):
                count += 1
    return count
''', "[[1, 1, 0], [0, 0, 1], [1, 0, 1]]")
add('''
def f(a):
    a = list(a)
    for i in range(len(a)):
        for j in range(len(a) - 1 - i):
            if a[j] > a[j + 1]:
                a[j], a[j + 1] = a[j + 1], a[j]
    return a
''', "[4, 2, 9, 1, 5]", "('b', 'a')")
add('''
def f(text):
    return {ch: text.count(ch) for ch in sorted(set(text)) if ch.isalpha()}
''', "'hello, world'")
add('''
def f(x):
    return [x, x * 1.5, x // 3, x % 3, -x ** 2, abs(-x), divmod(x, 4)]
''', "7", "-7")
add('''
def f(strs):
    if not strs:
        return ''
    prefix = strs[0]
    for s in strs[1:]:
        while not s.startswith(prefix):
            prefix = prefix[:-1]
    return prefix
''', "['flower', 'flow', 'flight']", "[]")
add('''
def f(s):
    return s.partition(':'), s.rpartition(':'), s.zfill(12), s.isdigit()
''', "'key:value:x'")
add('''
def f(nums):
    best = cur = nums[0]
    for n in nums[1:]:
        cur = max(n, cur + n)
        best = max(best, cur)
    return best
''', "[-2, 1, -3, 4, -1, 2, 1, -5, 4]")
add('''
def f(data):
    return sorted(data, key=lambda p: (p['age'], p['name']))[0]['name']
''', "[{'name': 'Zed', 'age': 30}, {'name': 'Amy', 'age': 25}, {'name': 'Bob', 'age': 25}]")
add('''
def f(s, n):
    shifted = []
    for ch in s:
        if ch.isalpha():
            base = ord('a') if ch.islower() else ord('A')
            shifted.append(chr((ord(ch) - base + n) % 26 + base))
        else:
            shifted.append(ch)
    return ''.join(shifted)
''', "'Hello, World!', 3")
add('''
def f(xs):
    return list(map(lambda p: p[0] * p[1], zip(xs, xs[1:]))), any(x > 3 for x in xs), all(xs)
''', "[1, 2, 3, 4]")
add('''
def f(d):
    total = 0
    for k in sorted(d):
        v = d[k]
        if isinstance(v, dict):
            total += f(v)
        else:
            total += v
    return total
''', "{'a': 1, 'b': {'c': 2, 'd': {'e': 3}}}")
add('''
def f(s):
    return s.encode('utf-8'), bytes(reversed(s.encode())), len(s.encode())
''', "'héllo'")
add('''
def f(n):
    return {i: i ** 2 for i in range(n)}, {i % 3 for i in range(n)}, frozenset(range(3))
''', "5")
add('''
def f(x):
    return float('nan') if x < 0 else float('inf'), complex(x, 1)
''', "-1", "2")
add('''
from fractions import Fraction
from decimal import Decimal

def f(a, b):
    return str(Fraction(a, b)), str(Decimal(a) / Decimal(b))
''', "1, 3")
add('''
import string

def f(s):
    return ''.join(c for c in s if c in string.ascii_letters + string.digits), s.translate(str.maketrans('abc', 'xyz'))
''', "'a-b_c 123!'")
add('''
from typing import List, Dict

def f(xs: List[int]) -> Dict[str, int]:
    return {'min': min(xs), 'max': max(xs), 'sum': sum(xs), 'len': len(xs)}
''', "[3, -1, 4, 1, -5]")
add('''
if __name__ == "__main__":
    print("never runs in the sandbox")

def f(x):
    result = x
    try:
        result = 10 // x
    except ZeroDivisionError:
        result = None
    finally:
        pass
    return result
''', "0", "3")
add('''
from collections import namedtuple

Point = namedtuple('Point', 'x y')

def f(a, b):
    p = Point(a, b)
    return p.x + p.y, tuple(p), p._asdict() if False else dict(zip(p._fields, p))
''', "2, 5")

Path(__file__).with_name("realworld.jsonl").write_text("".join(json.dumps(p) + "\n" for p in P))
print(len(P))

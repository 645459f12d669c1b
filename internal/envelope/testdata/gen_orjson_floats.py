"""Regenerate orjson_floats.txt: `python3 gen_orjson_floats.py > orjson_floats.txt`.

Each line is `<repr(float)> <orjson.dumps(float)>`, the oracle for ryuFormat
(orjson 3.8.3, the version the LionAGI vectors were recorded with).
"""
import random
import struct

import orjson

random.seed(7)
vals = [0.0, -0.0, 1.0, -1.0, 0.1, 0.5, 1e-5, 1e-6, 2.5e-5, 1e-7, 1e15, 1e16, 1e17, 1e20, 1e22,
        123456789.0, 1700000000.5, 1.5e300, 5e-324, 1.7976931348623157e308, 12345678901234567.0,
        0.000123, 9.999999999999999e15, 1e-4, 3.14159, 2.0**53, 2.0**60]
for _ in range(3000):
    bits = random.getrandbits(64)
    f = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if f != f or f in (float("inf"), float("-inf")):
        continue
    vals.append(f)
for _ in range(2000):
    vals.append(random.uniform(-1, 1) * 10 ** random.randint(-12, 22))
for f in vals:
    print(repr(f), orjson.dumps(f).decode())

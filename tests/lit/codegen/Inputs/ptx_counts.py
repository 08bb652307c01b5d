"""usage: ptx_counts.py FILE.ptx KERNEL... — per kernel, its global loads and shared stores by
width: `NAME: ld.global.v4 N, ld.global N, st.shared.v4 N, st.shared N` (any element type;
.nc loads count as loads)."""
import re
import sys

text = open(sys.argv[1]).read()
for name in sys.argv[2:]:
    match = re.search(r"\.entry " + re.escape(name) + r"\(.*?\n}\n", text, re.S)
    if not match:
        sys.exit(f"{sys.argv[1]}: no kernel {name}")
    ops = re.findall(r"^\s+(?:@%p\d+\s+)?((?:ld\.global|st\.shared)[.\w]*)", match.group(0), re.M)
    vector = lambda prefix: sum(op.startswith(prefix) and ".v4." in op for op in ops)
    scalar = lambda prefix: sum(op.startswith(prefix) and ".v" not in op for op in ops)
    print(f"{name}: ld.global.v4 {vector('ld.global')}, ld.global {scalar('ld.global')}, "
          f"st.shared.v4 {vector('st.shared')}, st.shared {scalar('st.shared')}")

"""Prints the classification table of docs/conversion.md from src/convert/classes.rs (FIELDS): python3 tools/classification_table.py src/convert/classes.rs"""
import re, sys
src = open(sys.argv[1]).read()
block = src[src.index("pub const FIELDS: &[Classified] = &["):]
block = block[:block.index("\n];")]
entries = re.findall(r'\b(security|behaviour|advisory)\(\s*"((?:[^"\\]|\\.)*)",\s*"((?:[^"\\]|\\.)*)",?\s*\)', block)
n = len(re.findall(r'\b(?:security|behaviour|advisory)\(', block)); assert len(entries) == n, (len(entries), n)
print("| field | class | why |")
print("| --- | --- | --- |")
for cls, field, why in entries:
    why = why.replace('\\"', '"').replace("|", "\\|")
    print(f"| `{field}` | {cls} | {why} |")

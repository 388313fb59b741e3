# Writes pages.c: enough functions of alternating kinds for several
# second-level pages.
import sys
out = open(sys.argv[1], 'w')
out.write('int sink(int);\n')
for i in range(2600):
    if i % 3 == 0:
        out.write(f'__attribute__((noinline)) int p{i}(int a) {{ return a * {i} + 1; }}\n')
    elif i % 3 == 1:
        out.write(f'__attribute__((noinline)) int p{i}(int a) {{ return sink(a) + {i}; }}\n')
    else:
        out.write(f'__attribute__((noinline)) int p{i}(int a) {{ volatile int v[8]; v[0] = a; return sink(v[0]) + sink(v[1]) + {i}; }}\n')

"""Textual IR for many_parameters.test.

  many_parameters.py step N    a training step's tail with N parameters: a loss and N
                               gradient outputs grad.p<i>, for append-optimizer;
  many_parameters.py kernel N  one hand-written multi_update kernel of N SGD updates."""
import sys

mode, count = sys.argv[1], int(sys.argv[2])
if mode == "step":
    params = ",\n           ".join([f"%p{i}: f32[3] = ones()" for i in range(count)] +
                                     [f"%grad.p{i}: f32[3] = ones()" for i in range(count)])
    types = ", ".join(["f32[]"] + ["f32[3]"] * count)
    returned = ", ".join(["%loss"] + [f"%grad.p{i}" for i in range(count)])
    print(f"""graph @many_parameters(%x: f32[4])
    params({params})
    -> ({types}) {{
  %loss = reduce_sum(%x) : f32[]
  return {returned}
}}""")
else:
    params = ", ".join([f"%w{i}: f32[2] = ones(), %g{i}: f32[2] = ones()" for i in range(count)])
    operands = ", ".join(f"%w{i}, %g{i}" for i in range(count))
    results = ", ".join(f"%n{i}" for i in range(count))
    types = ", ".join(["f32[2]"] * count)
    body = "\n".join(f"    %n{i} = sgd_update(%w{i}, %g{i}) {{lr = 0.1}} : f32[2]" for i in range(count))
    print(f"""graph @one_kernel()
    params({params})
    -> ({types}) {{
  {results} = kernel @sgd_multi({operands}) {{kind = "multi_update"}} : {types} {{
{body}
    return {results}
  }}
  return {results}
}}""")

#!/bin/bash
# issue 38: gpu_step.py qwen1.5b after background adapter saves
T0=$(date +%s)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu-carry/*.whl || { echo "pip install failed"; exit 3; }
export PYTHONPATH=$PWD:/tmp/site
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nproc
  python3 -c "import sys, torch, transformers, peft, pydantic, pydantic_core; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__, pydantic.VERSION, pydantic_core.__version__, torch.cuda.get_device_name(0))"
  cat .gpu-carry/commit.txt
} 2>&1 | tee $OUT/gpu.txt
python3 -W ignore -c "import popula.config, popula.runtime, popula.sandbox, popula.complexity, popula.league.league; print('imports ok')" || exit 4
set -o pipefail
python3 benchmarks/gpu_step.py --models qwen1.5b --rounds 3 2>&1 | tee $OUT/gpu_step_qwen.log
RC=$?
echo "run 1 rc=$RC elapsed=$(( $(date +%s) - T0 ))s"
if [ $RC -eq 0 ] && [ $(( $(date +%s) - T0 )) -lt 230 ]; then
  timeout $(( 500 - ($(date +%s) - T0) )) python3 benchmarks/gpu_step.py --models qwen1.5b --rounds 3 2>&1 | tee $OUT/gpu_step_qwen_run2.log
  echo "run 2 rc=$? elapsed=$(( $(date +%s) - T0 ))s"
fi
exit $RC

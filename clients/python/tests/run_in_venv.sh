#!/bin/sh
# run_in_venv.sh PYTHON ARGS...: runs the vLLM tests with build/venv's interpreter, or skips
# them (exit 77, ctest SKIP_RETURN_CODE) when packaging/python-venv.sh has not made the venv.
python=$1
shift
if [ ! -x "$python" ]; then
  echo "skipped: $python does not exist (packaging/python-venv.sh makes it)"
  exit 77
fi
exec "$python" "$@"

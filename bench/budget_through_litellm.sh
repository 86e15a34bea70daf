#!/bin/bash
# CJK prompts (Chinese, Korean, Japanese) through the LiteLLM proxy in front of a gateway
# that bills every prompt byte a token, with a $0.02 budget cap; USAGE: final (the gateway
# reports usage) or none (it does not: LiteLLM fills in its own count). Prints what the run
# recorded and what the byte-billing gateway would bill. Needs `litellm[proxy]` (LITELLM_BIN).
#   bash bench/budget_through_litellm.sh final|none
set -u
USAGE=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$ROOT
W=$(mktemp -d); cd "$W"
SIMPORT=$(python -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
LLPORT=$(python -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])")
python -m swarm_tui sim --port $SIMPORT --profile fixed:30 --prompt-counting bytes --usage $USAGE --rate-429 0 --rate-503 0 > sim.log 2>&1 &
SIM=$!
cat > ll.yaml <<YAML
model_list:
  - model_name: kimi-k2.5
    litellm_params:
      model: openai/kimi-k2.5
      api_base: http://127.0.0.1:$SIMPORT/v1
      api_key: sk-sim-0123456789abcdefghijklmnop
YAML
LITELLM_MASTER_KEY=sk-litellm-master-0123456789abcdef LITELLM_LOCAL_MODEL_COST_MAP=True ${LITELLM_BIN:-litellm} --config ll.yaml --port $LLPORT > ll.log 2>&1 &
LL=$!
for i in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:$LLPORT/health/liveliness && break; sleep 1; done
cat > c.toml <<TOML
[gateways.litellm]
base_url = "http://127.0.0.1:$LLPORT/v1"
key_env = ["GW_KEY"]
TOML
python - <<PY
import json
T={"zh":"请总结以下关于网关迁移的文档，列出延迟、成功率和成本的变化，并给出建议。"*12,
"ko":("다음 게이트웨이 마이그레이션 문서를 요약하고 지연 시간, 성공률, 비용 변화를 정리하세요. ")*8,
"ja":"次のゲートウェイ移行文書を要約し、遅延、成功率、コストの変化をまとめてください。"*12}
open("w.jsonl","w").write("".join(json.dumps({"id":f"{l}{i}","prompt":t,"model":"kimi-k2.5","max_tokens":200},ensure_ascii=False)+"\n" for i in range(80) for l,t in T.items()))
PY
rm -f runs.db
GW_KEY=sk-litellm-master-0123456789abcdef SWARM_TUI_DB=$W/runs.db XDG_CONFIG_HOME=$W/xdg python -m swarm_tui run w.jsonl --config c.toml --budget 0.02 --concurrency 20 --headless --json --quiet > out.json 2> err.txt
echo "exit $?"
python - <<PY
import json, sqlite3
from swarm_tui.prices import load_price_table
s=json.load(open("out.json")); price=load_price_table(None,{}, "x")
c=sqlite3.connect("runs.db")
calls=c.execute("SELECT t.task_json, a.tokens_in, a.tokens_out FROM attempts a JOIN tasks t ON t.run_id=a.run_id AND t.seq=a.seq WHERE a.outcome='ok'").fetchall()
billed=0.0
for raw, tin, tout in calls:
    t=json.loads(raw)
    out = tout if "$USAGE"=="final" else t["max_tokens"]
    billed += price.cost("kimi-k2.5", len(t["prompt"].encode())+4, out) or 0
print(f"usage=$USAGE succeeded={s['succeeded']} status={s['status']} recorded cost=\${s['cost_usd']:.6f} gateway billed (bytes+4, output {'reported' if '$USAGE'=='final' else 'max_tokens'})=\${billed:.6f} cap=\$0.02 billed<=cap: {billed<=0.02}")
print("tokens_in recorded vs bytes billed (first call):", calls[0][1], len(json.loads(calls[0][0])["prompt"].encode())+4)
PY
kill $LL $SIM 2>/dev/null

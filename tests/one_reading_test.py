"""A response is read once, relative to its prompt's template (`rewards.common.read`): when the
template opens the think block (DeepSeek-R1-Distill's ends the prompt with `<think>\\n`), only the
text after the first `</think>` is a final answer; no `</think>` is no answer; a second one is
malformed. Every verifier, the demo's chain_sum and the detectors read it the same way: checked
here on every honest answer of `honest_formats_test` (each domain's real layouts), through the
worker's scoring path, and through the worker's decoding with an R1-style chat template."""

import json

import numpy as np
import pytest

from prorl_jax import sandbox
from prorl_jax.records import Generation, PromptMeta
from prorl_jax.rewards import common, detectors
from prorl_jax.rewards.common import Score, read
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import worker
from tests.honest_formats_test import THINK, honest_jobs

R1_OPEN = "<｜Assistant｜><think>\n"
SCRATCH = "Let me try 91 first. So the answer is \\boxed{91}? Answer: C. <answer>91</answer>\n"


@pytest.mark.parametrize(
  "response, prompt, answer, why",
  [
    ("Answer: 4", "Q", "Answer: 4", ""),  # no think block anywhere: the whole text
    ("Answer: 4", "Q" + R1_OPEN, None, "unfinished"),  # the template opened it
    ("Answer: 4", None, "Answer: 4", ""),
    ("<think>hm Answer: 4", "Q", None, "unfinished"),
    ("hm</think>Answer: 4", "Q" + R1_OPEN, "Answer: 4", ""),
    ("<think>hm</think>Answer: 4", "Q" + R1_OPEN, "Answer: 4", ""),  # the tag written again
    ("hm</think>bad</think>Answer: 4", "Q" + R1_OPEN, None, "malformed"),
    ("<think>a</think>bad<think>b</think>ok", "Q", None, "malformed"),
    ("hm</think>Answer: 4 <think>more", "Q" + R1_OPEN, None, "malformed"),
    ("hm</think>", "Q" + R1_OPEN, "", ""),  # closed, then nothing: an empty answer
    ("Answer: 4", "Write <think> tags. Q", "Answer: 4", ""),  # the tag inside the question
    ("Answer: 4", "Q<think>\n  \n", None, "unfinished"),
  ],
)
def test_read_splits_once_relative_to_the_template(response, prompt, answer, why):
  got = read(response, prompt)
  assert got.answer == answer
  assert why in got.why and bool(got.why) == bool(why)


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(processes=2, timeout_s=30.0)
  yield p
  p.close()


def _r1_forms(job):
  """An honest job as an R1-templated run produces it (prompt ends `<think>\\n`, the response has
  no opening tag), and its two broken forms: never closed, and a second `</think>`."""
  source, response, ref, extra = job
  reasoning, answer = (
    response[len("<think>\n") :].split("</think>", 1)
    if response.startswith(THINK)
    else ("I worked it out.\n", response)
  )
  meta = dict(extra, prompt_text=extra.get("prompt_text", "") + R1_OPEN)
  return (
    (source, f"{reasoning}</think>{answer}", ref, meta),  # honest: paid
    (source, f"{reasoning}{answer}", ref, meta),  # the same text, thinking never closed
    (source, f"{reasoning}</think>\n{SCRATCH}</think>{answer}", ref, meta),  # a second </think>
  )


@pytest.mark.skipif(sandbox.check() is not None, reason="needs the bubblewrap sandbox")
def test_every_domain_pays_only_a_closed_think_block_under_an_r1_template(pool, tmp_path):
  jobs = honest_jobs(tmp_path)
  forms = [_r1_forms(j) for j in jobs]
  sources = {j[0] for j in jobs}
  domains = {"deepscaler", "gpqa", "scp", "ifeval", "codecontests", "humanevalplus"}
  assert domains <= sources, sources
  out = pool.score_many([f for three in forms for f in three])
  honest, unfinished, twice = out[0::3], out[1::3], out[2::3]
  refused = [(j[0], j[1][-60:], s.reason) for j, s in zip(jobs, honest) if s.value < 1]
  assert not refused, f"{len(refused)} of {len(jobs)}: {refused[:10]}"
  paid = [(j[0], s.reason) for j, s in zip(jobs, unfinished) if s.value > 0]
  assert not paid, paid[:10]
  assert {s.reason for s in unfinished} == {common.UNFINISHED}
  paid = [(j[0], s.reason) for j, s in zip(jobs, twice) if s.value > 0]
  assert not paid, paid[:10]
  assert all(s.reason.startswith("malformed") for s in twice), {s.reason for s in twice}


def test_the_demo_and_reasoning_gym_read_the_same_way(pool):
  r1 = {"prompt_text": "Sum them." + R1_OPEN}
  entry = {"question": "2+3?", "answer": "5", "metadata": {"source_dataset": "basic_arithmetic"}}
  jobs = [
    ("chain_sum", "adding</think><answer>5</answer>", "5", r1),
    ("chain_sum", "adding <answer>5</answer>", "5", r1),
    ("chain_sum", "<answer>5</answer>", "5", {"prompt_text": "Sum them."}),  # no think block
    ("reasoning_gym", "adding</think><answer>5</answer>", "5", {**r1, "entry": entry}),
    ("reasoning_gym", "adding <answer>5</answer>", "5", {**r1, "entry": entry}),
  ]
  assert [s.value for s in pool.score_many(jobs)] == [1.0, 0.0, 1.0, 1.0, 0.0]


def test_the_detectors_read_only_the_final_answer_too():
  hidden = "thinking with an invisible\u200bmark and a NaN"
  r1 = "Question?" + R1_OPEN
  assert detectors.flags("math", hidden + "</think>\\boxed{4}", Score(1.0), r1) == ()
  assert "invisible" in detectors.flags("math", "x</think>\\boxed{4\u200b}", Score(1.0), r1)
  program = "```python\nprint(4)\n```"
  assert detectors.flags("code", program, Score(0.0), r1) == ()  # never closed: no program
  assert detectors.flags("code", "x</think>" + program, Score(1.0), r1) == ("constant_program",)


def _r1_tokenizer(path):
  """A byte-level BPE tokenizer with DeepSeek-R1-Distill's chat template (it opens the think
  block) and its tags as added, non-special tokens."""
  import tokenizers
  import transformers
  from tokenizers import decoders, models, pre_tokenizers, trainers

  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]
  trainer = trainers.BpeTrainer(
    vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
  )
  tok.train_from_iterator(["the answer is boxed"], trainer)
  fast = transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token=specials[0], eos_token=specials[1]
  )
  fast.add_tokens(["<think>", "</think>"])
  fast.chat_template = (
    "{{ bos_token }}{% for m in messages %}<｜User｜>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
  )
  fast.save_pretrained(path)
  return transformers.AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("think_special", [False, True])
def test_the_worker_scores_an_r1_templated_response_from_its_tokens(pool, tmp_path, think_special):
  from prorl_jax.model.tokenizer import prompt_ids

  tok = _r1_tokenizer(str(tmp_path / "tok"))
  if think_special:  # a tokenizer that marks the tags special: the template's opening still counts
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
  prompt = prompt_ids(tok, [{"role": "user", "content": "What is 2+2?"}])
  assert tok.decode(prompt).endswith("<think>\n")
  assert common.template_opens_think(worker.prompt_text(tok, prompt))
  responses = ["2+2 is 4.</think>\\boxed{4}", "2+2 is \\boxed{4}", "4</think>x</think>\\boxed{4}"]
  rows = [tok.encode(r, add_special_tokens=False) + [tok.eos_token_id] for r in responses]
  width = max(map(len, rows))
  gen = Generation(
    tokens=np.asarray([r + [tok.eos_token_id] * (width - len(r)) for r in rows], np.int32),
    logprobs=np.zeros((len(rows), width), np.float32),
    lengths=np.asarray([len(r) for r in rows], np.int32),
    stopped=np.ones(len(rows), bool),
  )
  meta = [PromptMeta(data_source="math", reference="4", extra={}) for _ in rows]
  scores, failed, reasons = worker.score_rows(
    tok, gen, 1, meta, pool, None, [prompt] * len(rows), (tok.eos_token_id,)
  )
  assert scores.tolist() == [1.0, 0.0, 0.0], reasons
  assert not failed.any()
  assert reasons[1] == common.UNFINISHED and reasons[2].startswith("malformed")
  assert json.dumps(reasons)  # plain strings, as the result records them


def test_every_detector_flag_reaches_the_trainers_metrics(pool, tmp_path):
  """The pool counts each flag per source, the worker's result carries the request's counts
  through the exchange, and the trainer's step metrics hold each flag's share (`hacks/`)."""
  from prorl_jax.records import Result
  from prorl_jax.rollout.exchange import Exchange
  from prorl_jax.trainer.collect import Received

  ins = {"instructions": [{"type": "no_commas"}], "prompt_text": "Write about tea."}
  jobs = [
    ("ifeval", "<think>x</think>Tea is a fine\u200b drink served hot in many lands.", None, ins),
    (
      "ifeval",
      "<think>x</think>Tеа is a fine drink served hot in many lands.",
      None,
      ins,
    ),  # Cyrillic
    ("ifeval", "<think>x</think>Tea is a fine drink served hot in many lands today.", None, ins),
    ("math", "<think>x</think>\\boxed{nan}", "4", {"prompt_text": "2+2?"}),
  ]
  before = dict(pool.stats)
  pool.score_many(jobs)
  counts = worker.counts_since(pool.stats, before)
  assert counts["ifeval/scored"] == 3 and counts["math/scored"] == 1
  assert counts["ifeval/flagged/invisible"] == 1 and counts["ifeval/flagged/lookalike"] == 1
  assert counts["math/flagged/special_number"] == 1
  ex = Exchange(f"file://{tmp_path}/ex")
  result = Result(
    tokens=np.zeros((1, 2), np.int32), logprobs=np.zeros((1, 2), np.float32),
    lengths=np.ones(1, np.int32), stopped=np.ones(1, bool), scores=np.zeros(1, np.float32),
    verifier_failed=np.zeros(1, bool), policy_version=0, verifier_stats=counts, worker="w0",
  )  # fmt: skip
  ex.results.commit("r0", result)
  got = Received()
  got.verifier.update(ex.results.read("r0").verifier_stats)
  info = got.info()
  assert info["hacks/ifeval/invisible"] == pytest.approx(1 / 3)
  assert info["hacks/ifeval/lookalike"] == pytest.approx(1 / 3)
  assert info["hacks/math/special_number"] == 1.0

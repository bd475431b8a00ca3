"""Supervised fine-tuning with TRL's SFTTrainer and a LoRA adapter, as the field writes it: prompt-completion pairs
from a JSON-lines file, the loss on the completion only (TRL's default for that format), EOS appended to every
completion, sequences truncated to --max_length. The model is a tiny Llama built from a config and the tokenizer a
word-level one built from the data, so that it runs on a CPU in seconds without a download. campaign watches it
unchanged:

    campaign check --no-resume -- python examples/watch/sft.py --output_dir /tmp/sft

A --max_length shorter than prompt + answer cuts the answer and its EOS (TRL drops the rows whose answer it cuts
whole); campaign reads that from the batches the trainer fed:

    campaign check --no-resume -- python examples/watch/sft.py --output_dir /tmp/sft --max_length 12
"""
import argparse
import json
from pathlib import Path

from datasets import Dataset
from peft import LoraConfig
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / "data" / "support_answers.jsonl"))
parser.add_argument("--output_dir", required=True)
parser.add_argument("--max_length", type=int, default=1024)
parser.add_argument("--max_steps", type=int, default=20)
parser.add_argument("--batch_size", type=int, default=4)
parser.add_argument("--grad_accum", type=int, default=2)
cfg = parser.parse_args()

rows = [json.loads(line) for line in Path(cfg.data).read_text().splitlines() if line.strip()]
pairs = [{"prompt": f"question : {r['question']} answer :", "completion": f" {r['answer']}"} for r in rows]

words = sorted({w for p in pairs for w in (p["prompt"] + p["completion"]).split()})
vocab = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "<unk>", *words])}
backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                    pad_token="<pad>")

config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2)
model = LlamaForCausalLM(config)
lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
args = SFTConfig(output_dir=cfg.output_dir, max_length=cfg.max_length, per_device_train_batch_size=cfg.batch_size,
                 gradient_accumulation_steps=cfg.grad_accum, max_steps=cfg.max_steps, learning_rate=1e-3,
                 lr_scheduler_type="linear", warmup_steps=2, logging_steps=10, save_strategy="no", report_to=[],
                 use_cpu=True, disable_tqdm=True, seed=0)
trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(pairs), processing_class=tokenizer,
                     peft_config=lora)
trainer.train()

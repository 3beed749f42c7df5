"""The server log a real vLLM deployment would print: startup lines, periodic stats, access and error lines.

Line formats follow the reported version (research notes §7): no process prefix in 0.10.0, `(APIServer
pid=N)` / `(EngineCore_DP0 pid=N)` prefixes from 0.10.1, `vLLM API server version X` up to 0.14 and
`vLLM server version X, serving model Y` from 0.16, two KV-capacity lines up to 0.24 and one from 0.28.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

API_PID = 1


def _fmt_int(n: int) -> str:
    return f"{n:,}"


class LogBook:
    """An append-only log kept in memory and, when `path` is given, mirrored line by line to a file."""

    def __init__(self, cfg, path: Path | None = None) -> None:
        self.cfg = cfg
        self.lines: list[str] = []
        self.path = path
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("", encoding="utf-8")

    # -- processes --------------------------------------------------------------------------------
    def engine_process(self, engine: int) -> str:
        cfg = self.cfg
        if not cfg.at_least("0.10.2"):
            return f"EngineCore_{engine}"
        if cfg.data_parallel_size <= 1 and cfg.at_least("0.28"):
            return "EngineCore"
        return f"EngineCore_DP{engine}"

    @staticmethod
    def engine_pid(engine: int) -> int:
        return 240 + 131 * engine

    # -- writing ----------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        with self._lock:
            self.lines.append(text)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(text + "\n")

    def log(self, msg: str, *, level: str = "INFO", where: str = "api_server.py:1", process: str = "APIServer",
            pid: int = API_PID) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        for part in msg.split("\n"):
            body = f"{level} {stamp} [{where}] {part}"
            self._write(body if not self.cfg.at_least("0.10.1") else f"({process} pid={pid}) {body}")

    def engine(self, engine: int, msg: str, *, level: str = "INFO", where: str = "core.py:1") -> None:
        """A line from local engine `engine`, named by its global DP rank as vLLM names the process."""
        rank = self.cfg.rank(engine)
        self.log(msg, level=level, where=where, process=self.engine_process(rank), pid=self.engine_pid(rank))

    def uvicorn(self, msg: str) -> None:
        line = f"INFO:     {msg}"
        self._write(line if not self.cfg.at_least("0.10.1") else f"(APIServer pid={API_PID}) {line}")

    def access(self, client: str, method: str, path: str, status: int, phrase: str) -> None:
        self.uvicorn(f'{client} - "{method} {path} HTTP/1.1" {status} {phrase}')

    def text(self) -> str:
        with self._lock:
            return "".join(line + "\n" for line in self.lines)

    # -- what vLLM prints -------------------------------------------------------------------------
    def startup(self, plan, *, url: str, startup_oom: bool, capacity_error: str | None) -> None:
        """The startup sequence up to "Application startup complete." or the failure that stops it."""
        cfg = self.cfg
        v = cfg.vllm_version
        if cfg.at_least("0.16"):
            self.log(f"vLLM server version {v}, serving model {cfg.model}", where="startup.py:38")
        else:
            self.log(f"vLLM API server version {v}", where="api_server.py:1772")
        self.log(f"non-default args: {non_default_args(cfg)!r}", where="startup.py:96")
        self.log("Resolved architecture: KimiK3ForConditionalGeneration", where="model.py:744")
        self.log(f"Using max model len {cfg.max_model_len}", where="model.py:2170")
        self.log(f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.",
                 where="scheduler.py:310")
        for e in range(cfg.local_ranks):
            self.engine(e, f"Initializing a V1 LLM engine (v{v}) with config: {engine_config_str(cfg)}",
                        where="core.py:139")
        if cfg.block_size == 64 and cfg.extra_args.get("attention_backend") == "FLASHMLA":
            self.engine(0, "Forcing kv cache block size to 64 for FlashMLA backend.", where="cuda.py:157")
        weights_gib = plan.weights_mib / 1024
        self.engine(0, f"Starting to load model {cfg.model}...", where="gpu_model_runner.py:4978")
        self.engine(0, "Loading weights took 92.66 seconds", where="default_loader.py:506")
        if cfg.at_least("0.33"):
            self.engine(0, f"Model loading took {weights_gib:.2f} GiB memory and 94.714950 seconds",
                        where="gpu_model_runner.py:5088")
        else:
            self.engine(0, f"Model loading took {weights_gib:.4f} GiB and 94.714950 seconds",
                        where="gpu_model_runner.py:2167")
        if startup_oom:
            self._startup_oom(plan)
            return
        if capacity_error:
            self.engine(0, "EngineCore failed to start.", level="ERROR", where="core.py:708")
            self.engine(0, f"ValueError: {capacity_error}", level="ERROR", where="core.py:708")
            self.log("RuntimeError: Engine core initialization failed. See root cause above. "
                     "Failed core proc(s): {'EngineCore_DP0': 1}", level="ERROR", where="utils.py:1012")
            return
        kv_gib = f"{plan.kv_gib:.2f}"
        self.engine(0, f"Available KV cache memory: {kv_gib} GiB", where="gpu_worker.py:772")
        tokens = _fmt_int(plan.kv_tokens)
        conc = plan.kv_tokens / cfg.max_model_len
        for e in range(cfg.local_ranks):
            if cfg.at_least("0.28"):
                self.engine(e, f"GPU KV cache size: {tokens} tokens, Maximum concurrency for "
                               f"{_fmt_int(cfg.max_model_len)} tokens per request: {conc:.2f}x",
                            where="kv_cache_utils.py:1147")
            else:
                self.engine(e, f"GPU KV cache size: {tokens} tokens", where="kv_cache_utils.py:864")
                self.engine(e, f"Maximum concurrency for {_fmt_int(cfg.max_model_len)} tokens per request: "
                               f"{conc:.2f}x", where="kv_cache_utils.py:868")
        self.engine(0, f"Graph capturing finished in 12 secs, took {plan.cudagraph_mib / 1024:.2f} GiB",
                    where="gpu_model_runner.py:6516")
        unit = "s" if cfg.at_least("0.24") else "seconds"
        self.engine(0, f"init engine (profile, create kv cache, warmup model) took 325.02 {unit}",
                    where="core.py:395")
        self.log("Supported tasks: ['generate']", where="entry.py:135")
        if cfg.enable_auto_tool_choice:
            msg = ('"auto" tool choice has been enabled.' if cfg.at_least("0.16") else
                   '"auto" tool choice has been enabled please note that while the parallel_tool_calls client '
                   'option is preset for compatibility reasons, it will be ignored.')
            self.log(msg, where="parser_manager.py:36")
        if cfg.at_least("0.18"):
            self.log(f"Starting vLLM server on {url}", where="entry.py:139")
        else:
            self.log(f"Starting vLLM API server 0 on {url}", where="api_server.py:1912")
        self.log("Available routes are:", where="launcher.py:188")
        for route, methods in (("/health", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
                               ("/v1/models", "GET"), ("/version", "GET"), ("/v1/chat/completions", "POST"),
                               ("/v1/completions", "POST"), ("/metrics", "GET")):
            self.log(f"Route: {route}, Methods: {methods}", where="launcher.py:197")
        self.uvicorn(f"Started server process [{API_PID}]")
        self.uvicorn("Waiting for application startup.")
        self.uvicorn("Application startup complete.")

    def _startup_oom(self, plan) -> None:
        total_gib = plan.total_mib / 1024
        self.engine(0, "EngineCore failed to start.", level="ERROR", where="core.py:708")
        self.engine(0, "Traceback (most recent call last):", level="ERROR", where="core.py:708")
        self.engine(0, '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", '
                       "line 301, in determine_available_memory", level="ERROR", where="core.py:708")
        self.engine(0, "    self.model_runner.profile_run()", level="ERROR", where="core.py:708")
        self.engine(0, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total "
                       f"capacity of {total_gib:.2f} GiB of which 1.21 GiB is free. Process {self.engine_pid(0)} has "
                       f"{total_gib - 1.21:.2f} GiB memory in use. Of the allocated memory {total_gib - 4.6:.2f} GiB "
                       "is allocated by PyTorch, and 2.18 GiB is reserved by PyTorch but unallocated. If reserved "
                       "but unallocated memory is large try setting "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
                    level="ERROR", where="core.py:708")
        self.log("RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {'EngineCore_DP0': 1}", level="ERROR", where="utils.py:1012")

    def engine_death(self, engine: int, cause: str, plan) -> None:
        """A fatal engine error while serving, then the frontend's EngineDeadError."""
        self.engine(engine, "EngineCore encountered a fatal error.", level="ERROR", where="core.py:1586")
        for frame in ("Traceback (most recent call last):",
                      '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 548, '
                      "in run_busy_loop",
                      "    self._process_engine_step()",
                      '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1290, in step',
                      "    model_output = self.execute_model_with_error_logging("):
            self.engine(engine, frame, level="ERROR", where="core.py:1586")
        if cause == "oom":
            total_gib = plan.total_mib / 1024
            free_gib = max(total_gib - plan.reserved_mib / 1024, 0.5)
            self.engine(engine, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.25 GiB. GPU 0 has "
                                f"a total capacity of {total_gib:.2f} GiB of which {free_gib:.2f} GiB is free. "
                                f"Process {self.engine_pid(engine)} has {total_gib - free_gib:.2f} GiB memory in use. "
                                f"Of the allocated memory {plan.reserved_mib / 1024 - 3.9:.2f} GiB is allocated by "
                                "PyTorch, and 3.91 GiB is reserved by PyTorch but unallocated. If reserved but "
                                "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                                "to avoid fragmentation.", level="ERROR", where="core.py:1586")
        else:
            self.engine(engine, "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was "
                                "encountered', please check the stack trace above for the root cause",
                        level="ERROR", where="core.py:1586")
        self.log("AsyncLLM output_handler failed.", level="ERROR", where="async_llm.py:943")
        self.log("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                 "(above) for the root cause.", level="ERROR", where="async_llm.py:943")

    def stats(self, engine: int, *, prompt_tps: float, gen_tps: float, running: int, waiting: int, usage: float,
              hit_rate: float, preemptions: int) -> None:
        pre = f"Preemptions: {preemptions}, " if preemptions and self.cfg.at_least("0.12") else ""
        self.log(f"Engine {self.cfg.rank(engine):03d}: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
                 "Avg generation throughput: "
                 f"{gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, {pre}"
                 f"GPU KV cache usage: {usage * 100:.1f}%, Prefix cache hit rate: {hit_rate * 100:.1f}%",
                 where="loggers.py:335")


def non_default_args(cfg) -> dict:
    args: dict = {"model_tag": cfg.model, "host": "0.0.0.0", "model": cfg.model}
    if cfg.served_model_name != cfg.model:
        args["served_model_name"] = [cfg.served_model_name]
    args["max_model_len"] = cfg.max_model_len
    if cfg.tensor_parallel_size > 1:
        args["tensor_parallel_size"] = cfg.tensor_parallel_size
    if cfg.data_parallel_size > 1:
        args["data_parallel_size"] = cfg.data_parallel_size
    if cfg.data_parallel_size_local is not None:
        # a node of a multi-node layout: its share of the ranks, one API server per node (hybrid load balancing)
        args["data_parallel_size_local"] = cfg.data_parallel_size_local
        if cfg.data_parallel_start_rank:
            args["data_parallel_start_rank"] = cfg.data_parallel_start_rank
        args["data_parallel_hybrid_lb"] = True
    if cfg.block_size != 16:
        args["block_size"] = cfg.block_size
    default_util = 0.92 if cfg.at_least("0.24") else 0.9
    if cfg.gpu_memory_utilization != default_util:
        args["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    # the flag's default is None (resolved per model: off for hybrid models such as Kimi K3), so passing
    # --enable-prefix-caching or --no-enable-prefix-caching always lists it, as the emulated deployments do
    args["enable_prefix_caching"] = cfg.enable_prefix_caching
    if cfg.hybrid_retention:
        args["prefix_cache_retention_interval"] = cfg.prefix_cache_retention_interval
    if cfg.speculative_tokens:
        args["speculative_config"] = {"method": "dspark", "model": "Inferact/Kimi-K3-DSpark",
                                      "num_speculative_tokens": cfg.speculative_tokens}
    args["max_num_batched_tokens"] = cfg.max_num_batched_tokens
    args["max_num_seqs"] = cfg.max_num_seqs
    if cfg.enable_auto_tool_choice:
        args["enable_auto_tool_choice"] = True
    if cfg.tool_call_parser:
        args["tool_call_parser"] = cfg.tool_call_parser
    if cfg.reasoning_parser:
        args["reasoning_parser"] = cfg.reasoning_parser
    if cfg.enable_prompt_tokens_details:
        args["enable_prompt_tokens_details"] = True
    args.update(dict(cfg.extra_args))
    return args


def engine_config_str(cfg) -> str:
    return (f"model='{cfg.model}', speculative_config=None, tokenizer='{cfg.model}', skip_tokenizer_init=False, "
            f"tokenizer_mode=auto, revision=None, tokenizer_revision=None, "
            f"trust_remote_code={bool(cfg.extra_args.get('trust_remote_code'))}, dtype=torch.bfloat16, "
            f"max_seq_len={cfg.max_model_len}, download_dir=None, load_format=auto, "
            f"tensor_parallel_size={cfg.tensor_parallel_size}, pipeline_parallel_size=1, "
            f"data_parallel_size={cfg.data_parallel_size}, "
            f"disable_custom_all_reduce={bool(cfg.extra_args.get('disable_custom_all_reduce'))}, quantization=mxfp4, "
            f"enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed={cfg.seed}, "
            f"served_model_name={cfg.served_model_name}, enable_prefix_caching={cfg.enable_prefix_caching}, "
            f"chunked_prefill_enabled=True")

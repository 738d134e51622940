"""The process layout of a vLLM-CPU engine (``nbkit.engines.sizing.cpu_process_layout``): what it asks of vLLM's
environment while the engine starts, and what it leaves alone."""

from nbkit.engines.sizing import WORKER_EXIT_GRACE, cpu_process_layout


def test_a_cpu_engine_runs_its_worker_apart_and_gives_it_one_second_to_leave_at_close(monkeypatch):
    monkeypatch.delenv(WORKER_EXIT_GRACE, raising=False)
    kwargs = {}
    assert cpu_process_layout(kwargs) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", WORKER_EXIT_GRACE: "1"}
    assert kwargs == {"distributed_executor_backend": "mp"}  # the worker in a process of its own


def test_a_grace_the_user_exported_wins_and_a_named_executor_is_left_to_vllm(monkeypatch):
    monkeypatch.setenv(WORKER_EXIT_GRACE, "7")
    assert cpu_process_layout({})[WORKER_EXIT_GRACE] == "7"
    assert cpu_process_layout({"distributed_executor_backend": "external_launcher"}) == {}

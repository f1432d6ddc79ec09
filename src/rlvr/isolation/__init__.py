"""Running untrusted code and killable work: the bubblewrap sandbox (launch, runner, checker,
seccomp filter, memory cgroup) and worker processes killed on timeout. Below both `rewards/`
(the code verifier, the verifier pool) and `environments/` (the python tool); stdlib only."""

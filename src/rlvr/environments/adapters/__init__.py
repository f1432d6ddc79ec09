"""Other libraries' environments behind rlvr's environment protocol, one module per library
(`environment.name=LIBRARY:REF`; rlvr.environments.registry). Each module imports its
library on first use only: the library is an optional extra."""

"""Memory planning (`rlvr estimate`): what a config needs, before anything is loaded."""

/*
 * cmd_loadgen.c — `kvinfer loadgen`: placeholder until the load generator lands.
 */
#include "cli.h"

int cmd_loadgen(int argc, char **argv) { return cli_error("loadgen: not implemented yet"); }

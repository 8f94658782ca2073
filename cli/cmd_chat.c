/*
 * cmd_chat.c — `kvinfer chat`: placeholder until the interactive chat lands.
 */
#include "cli.h"

int cmd_chat(int argc, char **argv) { return cli_error("chat: not implemented yet"); }

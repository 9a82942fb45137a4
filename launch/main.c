/* launch/main.c - the sluice command line: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "core/backend.h"

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        printf("usage: sluice <command> [args]\n");
        return argc < 2 ? 2 : 0;
    }
    return 2;
}

// glibc's closefrom action for posix_spawn, which <spawn.h> declares only under _GNU_SOURCE
// (Swift's Glibc module does not define it).
#ifndef SPAWN_SHIMS_H
#define SPAWN_SHIMS_H

#include <spawn.h>

// Adds an action closing every descriptor from `from` up in the child (glibc 2.34 and later).
int fleet_spawn_file_actions_addclosefrom(posix_spawn_file_actions_t *actions, int from);

#endif

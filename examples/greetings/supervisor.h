/* greetings --processes N: a parent that keeps N serving children. */
#ifndef GREETINGS_SUPERVISOR_H
#define GREETINGS_SUPERVISOR_H

/*
 * Fork n children and return in each of them (the child then serves as a
 * single greetings would). The parent never returns: it restarts a child
 * that dies, forwards SIGTERM/SIGINT to the children once so they stop
 * gracefully, and exits 0 when every child exited 0 after that (1 if one
 * did not, or if children keep dying at start: 3 in a row within a second).
 */
void greetings_supervise(unsigned n);

#endif

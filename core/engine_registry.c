/*
 * The engines compiled into this libsrv, in order of preference (libevent's
 * eventops array). Which ones are built is decided by meson's `engine`
 * option through srv_build_config.h (SRV_BUILT_ENGINES).
 */
#include "srv_build_config.h"
#include "srv_engine.h"

#include <stdlib.h>
#include <string.h>

/* SRV_BUILT_ENGINES(X): X(name) for each engine built, in order of
 * preference (meson.build's implemented_engines). */
#define SRV__DECLARE(name) extern const srv_engine srv_engine_##name;
SRV_BUILT_ENGINES(SRV__DECLARE)
#undef SRV__DECLARE

static const srv_engine *const srv__engines[] = {
#define SRV__ENTRY(name) &srv_engine_##name,
    SRV_BUILT_ENGINES(SRV__ENTRY)
#undef SRV__ENTRY
};

#define SRV__ENGINE_COUNT (sizeof srv__engines / sizeof srv__engines[0])
_Static_assert(SRV__ENGINE_COUNT > 0, "libsrv needs at least one engine");

const srv_engine *srv_engine_default(void)
{
    return srv__engines[0];
}

const srv_engine *srv_engine_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < SRV__ENGINE_COUNT; i++)
        if (strcmp(srv__engines[i]->name, name) == 0)
            return srv__engines[i];
    return NULL;
}

int srv_engine_select(const char *name, const srv_engine **out)
{
    if (out == NULL)
        return SRV_EINVAL;
    if (name == NULL) {
        const char *env = getenv("SRV_ENGINE");
        if (env != NULL && env[0] != '\0')
            name = env;
    }
    const srv_engine *e = name != NULL ? srv_engine_find(name) : srv_engine_default();
    if (e == NULL)
        return SRV_ENOENGINE;
    *out = e;
    return 0;
}

const char *srv_engine_name(const srv_engine *engine)
{
    return engine != NULL ? engine->name : "(none)";
}

unsigned srv_engine_caps(const srv_engine *engine)
{
    if (engine == NULL)
        return 0;
    unsigned caps = engine->caps | (engine->lib_caps != NULL ? engine->lib_caps() : 0);
    return caps & ~(unsigned)SRV_ENGINE_CAPS_INTERNAL;
}

size_t srv_engine_count(void)
{
    return SRV__ENGINE_COUNT;
}

const srv_engine *srv_engine_at(size_t index)
{
    return index < SRV__ENGINE_COUNT ? srv__engines[index] : NULL;
}

#include "fleet_shims.h"

static void fleet_quiet_log(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {
    // libvips reports failures through vips_error_buffer(); its GLib warnings would only
    // reach standard error outside the fleet's JSON logs.
}

int fleet_vips_init(const char *program) {
    int result = VIPS_INIT(program);
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO, fleet_quiet_log, NULL);
    return result;
}

VipsImage *fleet_vips_open(const char *path, int fail_on) {
    return vips_image_new_from_file(path, "fail_on", (VipsFailOn) fail_on, NULL);
}

int fleet_vips_thumbnail(const char *path, VipsImage **out, int width, int fail_on, const char *export_profile) {
    if (export_profile == NULL) {
        return vips_thumbnail(path, out, width,
                              "height", VIPS_MAX_COORD,
                              "size", VIPS_SIZE_DOWN,
                              "fail_on", (VipsFailOn) fail_on,
                              NULL);
    }
    return vips_thumbnail(path, out, width,
                          "height", VIPS_MAX_COORD,
                          "size", VIPS_SIZE_DOWN,
                          "export_profile", export_profile,
                          "fail_on", (VipsFailOn) fail_on,
                          NULL);
}

int fleet_vips_flatten_white(VipsImage *in, VipsImage **out) {
    double white[3] = {255.0, 255.0, 255.0};
    VipsArrayDouble *background = vips_array_double_new(white, 3);
    int result = vips_flatten(in, out, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    return result;
}

int fleet_vips_to_srgb(VipsImage *in, VipsImage **out) {
    return vips_colourspace(in, out, VIPS_INTERPRETATION_sRGB, NULL);
}

int fleet_vips_jpeg_buffer(VipsImage *in, void **buffer, size_t *length, int quality) {
    return vips_jpegsave_buffer(in, buffer, length,
                                "Q", quality,
                                "optimize_coding", TRUE,
                                "strip", TRUE,
                                NULL);
}

int fleet_vips_pixel(VipsImage *in, int x, int y, double rgb[3]) {
    double *vector = NULL;
    int n = 0;
    if (vips_getpoint(in, &vector, &n, x, y, NULL)) return -1;
    for (int i = 0; i < 3; i++) rgb[i] = i < n ? vector[i] : 0;
    g_free(vector);
    return 0;
}

void fleet_g_free(void *pointer) {
    g_free(pointer);
}

void fleet_vips_unref(VipsImage *image) {
    if (image) g_object_unref(image);
}

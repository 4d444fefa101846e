"""URLs of the runnable project: the admin only."""

from django.contrib import admin
from django.urls import path

# The operator's console is read on laptop screens: the menu sidebar would
# take a quarter of a 1360 px screen from the lists; the home page and the
# breadcrumbs lead everywhere it does.
admin.site.enable_nav_sidebar = False

urlpatterns = [path("admin/", admin.site.urls)]
